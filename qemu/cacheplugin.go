package qemu

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CachePlugin drives the cachemodel plugin for one boot: it builds the
// plugin, shares the guest's RAM with it through a memory-backend-file
// (on /dev/shm when there is one) and reads its counters.
type CachePlugin struct {
	SoC  CacheSoC
	Map  MemoryMap
	so   string
	dump string
	ram  string
	args []string
}

// NewCachePlugin prepares the plugin for elf (built for board) in dir.
// marks are functions of the image whose every execution snapshots the
// counters (CacheSnapshot.Marks).
func NewCachePlugin(root, dir, elfPath, board string, marks ...string) (*CachePlugin, error) {
	mm, err := BoardMemoryMap(root, board)
	if err != nil {
		return nil, err
	}
	return newCachePlugin(dir, elfPath, board, mm, true, marks)
}

// NewBaselineCachePlugin prepares the plugin for the baseline firmware
// (TamaGo's own ENET driver, module baseline/) built for board. Its memory
// map is TamaGo's, read from the image: arm.(*CPU).initL1Table (tamago
// v1.26.0 arm/mmu.go) maps [runtime/goos.RamStart, +RamSize) as
// MemoryRegion (TEX=000 C=1 B=1: Write-Back, no Write-Allocate) and every
// other section as DeviceRegion (C=0 B=0: strongly ordered, ARMv7 ARM
// B3.8.2 Table B3-10), among them the DMA region imx6ul's init gives the
// ENET's rings and buffers (dma.Init(OCRAM_START, OCRAM_SIZE), OCRAM at
// 0x00900000): the model counts those accesses as uncached. The baseline
// has no by-MVA maintenance routines (its DMA memory is not cached).
func NewBaselineCachePlugin(dir, elfPath, board string) (*CachePlugin, error) {
	start, err := elfWord(elfPath, "runtime/goos.RamStart")
	if err != nil {
		return nil, err
	}
	size, err := elfWord(elfPath, "runtime/goos.RamSize")
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("qemu: baseline %s: runtime/goos.RamSize is 0", elfPath)
	}
	return newCachePlugin(dir, elfPath, board, MemoryMap{RAMStart: start, GoRAMSize: size}, false, nil)
}

// elfWord reads the initial value of a 32-bit variable of an ELF image.
func elfWord(path, name string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ss, err := f.Symbols()
	if err != nil {
		return 0, fmt.Errorf("qemu: symbols of %s: %w", path, err)
	}
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for _, sec := range f.Sections {
			if s.Value < sec.Addr || s.Value+4 > sec.Addr+sec.Size || sec.Type != elf.SHT_PROGBITS {
				continue
			}
			b := make([]byte, 4)
			if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
				return 0, fmt.Errorf("qemu: reading %s in %s: %w", name, path, err)
			}
			return uint64(f.ByteOrder.Uint32(b)), nil
		}
		return 0, fmt.Errorf("qemu: %s in %s is not in an initialised section", name, path)
	}
	return 0, fmt.Errorf("qemu: no symbol %s in %s", name, path)
}

func newCachePlugin(dir, elfPath, board string, mm MemoryMap, needRoutines bool, marks []string) (*CachePlugin, error) {
	key, err := BoardSoC(board)
	if err != nil {
		return nil, err
	}
	syms, err := elfSymbols(elfPath)
	if err != nil {
		return nil, err
	}
	p := &CachePlugin{SoC: CacheSoCs[key], Map: mm, dump: filepath.Join(dir, "cachemodel.dump")}
	src := filepath.Join(dir, "cachemodel.c")
	p.so = filepath.Join(dir, "cachemodel.so")
	if err := os.WriteFile(src, CachePluginSource, 0o644); err != nil {
		return nil, err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", p.so, src, "-lpthread").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("qemu: compiling the cache model plugin: %v\n%s", err, out)
	}
	shm := dir
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm = "/dev/shm"
	}
	f, err := os.CreateTemp(shm, "tamanic-ram-")
	if err != nil {
		return nil, err
	}
	p.ram = f.Name()
	f.Close()
	os.Remove(p.dump)
	os.Remove(p.dump + ".req")
	wa := 0
	if p.SoC.WriteAllocate {
		wa = 1
	}
	p.args = []string{"out=" + p.dump, "l1=" + p.SoC.L1.arg(), "l2=" + p.SoC.L2.arg(), fmt.Sprintf("wa=%d", wa),
		fmt.Sprintf("ram=%s@%#x", p.ram, mm.RAMStart)}
	if p.SoC.Outer {
		p.args = append(p.args, "outer=1", fmt.Sprintf("pl310=%#x", p.SoC.PL310Base))
		// QEMU 7.2's sabrelite has no PL310 (CACHE_ID reads 0, so the
		// firmware maintains L1 only: board/sabrelite EnableL2): the
		// plugin adds to each by-MVA range operation what dma.TwoLevel
		// does on silicon: the PL310 line operation with its strongly
		// ordered register store per line (a device access), the second
		// inner pass of an invalidate, and CACHE_SYNC (cachemodel.c
		// mirror_line, mirror_sync).
		p.args = append(p.args, "pl310mirror=1")
	}
	for _, r := range p.SoC.DeviceWindows {
		p.args = append(p.args, fmt.Sprintf("io=%#x-%#x", r[0], r[1]))
	}
	for _, r := range mm.Cacheable() {
		if r[1] > r[0] {
			p.args = append(p.args, fmt.Sprintf("wb=%#x-%#x", r[0], r[1]))
		}
	}
	for name, kind := range maintenanceRoutines {
		s, ok := syms[name]
		if !ok && !needRoutines {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("qemu: cache model: no %s in %s", name, elfPath)
		}
		p.args = append(p.args, fmt.Sprintf("mva=%s@%#x-%#x", kind, s[0], s[1]))
	}
	for _, name := range marks {
		s, ok := syms[name]
		if !ok {
			return nil, fmt.Errorf("qemu: cache model: no mark function %s in %s", name, elfPath)
		}
		p.args = append(p.args, fmt.Sprintf("mark=%#x", s[0]))
	}
	return p, nil
}

// SetWriteAllocate overrides whether store misses allocate (CacheSoC's
// WriteAllocate, from the mapping's attributes): the other reading of the
// cores' treatment of Write-Back no-Write-Allocate memory, for comparison.
func (p *CachePlugin) SetWriteAllocate(on bool) {
	wa := "wa=0"
	if on {
		wa = "wa=1"
	}
	for i, a := range p.args {
		if strings.HasPrefix(a, "wa=") {
			p.args[i] = wa
		}
	}
	p.SoC.WriteAllocate = on
}

// QEMUArgs are the arguments loading the plugin, with the guest's RAM
// (ramSize bytes, the board's -m) in the shared backend file.
func (p *CachePlugin) QEMUArgs(ramSize string) []string {
	return append([]string{"-object", "memory-backend-file,id=tamanic-ram,size=" + ramSize + ",mem-path=" + p.ram + ",share=on",
		"-machine", "memory-backend=tamanic-ram"}, p.PluginArgs()...)
}

// UseRAMFile makes the plugin read the guest's RAM from path, a backend
// file another part of the command line already shares (the ConnectX
// co-simulation's, CosimArgs), instead of its own.
func (p *CachePlugin) UseRAMFile(path string) {
	os.Remove(p.ram)
	for i, a := range p.args {
		if strings.HasPrefix(a, "ram=") {
			p.args[i] = fmt.Sprintf("ram=%s@%#x", path, p.Map.RAMStart)
		}
	}
	p.ram = path
}

// PluginArgs are the arguments loading the plugin alone (with UseRAMFile).
func (p *CachePlugin) PluginArgs() []string {
	return []string{"-plugin", strings.Join(append([]string{p.so}, p.args...), ",")}
}

// Close removes the shared RAM file (after QEMU has stopped).
func (p *CachePlugin) Close() { os.Remove(p.ram) }

// CacheCounts are the plugin's counters by name (see cachemodel.c).
type CacheCounts map[string]float64

// Sub returns c - b.
func (c CacheCounts) Sub(b CacheCounts) CacheCounts {
	d := CacheCounts{}
	for k, v := range c {
		d[k] = v - b[k]
	}
	return d
}

// RequestPluginDump asks a tamanic TCG plugin (icprof.c, cachemodel.c) to
// write its counters to dump: it creates dump.req and waits, at most 20 s,
// for the plugin's watcher thread to write the dump and remove the request.
func RequestPluginDump(dump string) error {
	if err := os.WriteFile(dump+".req", nil, 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(dump + ".req"); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the plugin wrote no dump (is it loaded?)")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CacheSnapshot is one dump: the counters now and at each mark executed.
type CacheSnapshot struct {
	Now   CacheCounts
	Marks []CacheCounts
}

// Snapshot asks the plugin for its counters.
func (p *CachePlugin) Snapshot() (CacheSnapshot, error) {
	var s CacheSnapshot
	if err := RequestPluginDump(p.dump); err != nil {
		return s, fmt.Errorf("qemu: the cache model plugin: %w", err)
	}
	b, err := os.ReadFile(p.dump)
	if err != nil {
		return s, err
	}
	s.Now = CacheCounts{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		dst := s.Now
		if len(f) == 3 && strings.HasPrefix(f[0], "M") {
			k, err := strconv.Atoi(f[0][1:])
			if err != nil || k < 0 || k > len(s.Marks) {
				return s, fmt.Errorf("qemu: cache model dump line %q", line)
			}
			if k == len(s.Marks) {
				s.Marks = append(s.Marks, CacheCounts{})
			}
			dst, f = s.Marks[k], f[1:]
		}
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return s, fmt.Errorf("qemu: cache model dump line %q: %w", line, err)
		}
		dst[f[0]] = float64(v)
	}
	return s, nil
}

// elfSymbols returns the [start, end) of every sized symbol of an ELF.
func elfSymbols(path string) (map[string][2]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ss, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("qemu: symbols of %s: %w", path, err)
	}
	m := map[string][2]uint64{}
	for _, s := range ss {
		if s.Size > 0 {
			m[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	return m, nil
}
