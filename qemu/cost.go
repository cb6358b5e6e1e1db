package qemu

import (
	"debug/elf"
	_ "embed" // CachePluginSource
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tamanic/tamanic/pcie"
)

// CostRun is one transfer measured by tamanic-cost (its -json output): the
// guest's instructions per MiB under -icount shift=0, split by the
// firmware's stage timers, for the firmware as built (stock gVisor, or
// gVisor with the patches in docs/gvisor-patches/ that GVisorPatches
// names, applied by scripts/gvisor-patched.sh).
type CostRun struct {
	Board         string   `json:"board"`
	Dir           string   `json:"dir"` // tx (guest to host) or rx (host to guest)
	Mode          string   `json:"mode"`
	Copybreak     int      `json:"copybreak"`
	Run           int      `json:"run"`
	Bytes         int64    `json:"bytes"`
	GVisorPatches []string `json:"gvisor_patches"`
	// Instructions per MiB: busy (all but the idle loop), the NIC
	// interrupt handler, the endpoint's receive passes and its transmit
	// calls; the rest is gVisor's TCP, the application and the scheduler.
	Busy float64 `json:"busy_per_mib"`
	IRQ  float64 `json:"irq_per_mib"`
	RX   float64 `json:"endpoint_rx_per_mib"`
	TX   float64 `json:"endpoint_tx_per_mib"`
	// With tamanic-cost -cache: the cache model's counters per MiB
	// (CacheCounts), the SoC modelled and the estimated cycles per MiB
	// (SoCCosts[SoC].Cycles).
	Cache  CacheCounts `json:"cache_per_mib,omitempty"`
	SoC    string      `json:"soc,omitempty"`
	Cycles float64     `json:"cycles_per_mib,omitempty"`
}

// ReadCostRuns reads a tamanic-cost -json file.
func ReadCostRuns(path string) ([]CostRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qemu: reading cost runs: %w", err)
	}
	var rs []CostRun
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("qemu: decoding cost runs %s: %w", path, err)
	}
	return rs, nil
}

// CachePluginSource is the cachemodel TCG plugin (cmd/tamanic-cost/plugin/
// cachemodel.c): every guest load and store through a model of the SoC's
// data caches, the by-MVA and PL310 maintenance acting on it.
//
//go:embed cmd/tamanic-cost/plugin/cachemodel.c
var CachePluginSource []byte

// CacheLevel is one data cache: size, associativity, line and replacement
// policy (lru, random or rr) as the plugin's l1=/l2= arguments take them.
type CacheLevel struct {
	Size, Ways, Line int
	Policy           string
}

func (l CacheLevel) arg() string {
	return fmt.Sprintf("%d:%d:%d:%s", l.Size, l.Ways, l.Line, l.Policy)
}

// CacheSoC is the data side of one SoC's memory system as the plugin
// models it.
type CacheSoC struct {
	Name   string
	L1, L2 CacheLevel
	// Outer: the L2 is a PL310 outside the core, which the CP15 by-MVA
	// operations do not reach; its own registers at PL310Base maintain it.
	Outer     bool
	PL310Base uint64
	// DeviceWindows are physical ranges counted as device accesses
	// even where QEMU backs them with RAM: the PCIe outbound memory
	// window, where the ConnectX co-simulation's BAR is an ivshmem-plain
	// RAM BAR but on silicon is the device's memory space behind the
	// root complex.
	DeviceWindows [][2]uint64
	// WriteAllocate: whether a store miss allocates. TamaGo maps RAM
	// (and the boards remap the DMA buffers) with TEX=000 C=1 B=1:
	// "Outer and Inner Write-Back, no Write-Allocate" (ARM Architecture
	// Reference Manual ARMv7-A/R, B3.8.2, Table B3-10).
	WriteAllocate bool
}

// CacheSoCs are the modelled SoCs.
//
// i.MX6ULL (and i.MX6UL): one Cortex-A7 with a 32 KB L1 data cache and a
// 128 KB unified L2 (i.MX 6ULL Applications Processor Reference Manual
// rev. 1, 1.4 "Features"). The Cortex-A7's L1 data cache is 4-way with
// 64-byte lines (Cortex-A7 MPCore TRM r0p5, DDI 0464F, 6.6.1: 4-way, set
// index bits [S+5:6]); its L2 has 64-byte lines and is 8-way (TRM 7.1;
// Linux d12a384a1b26 "ARM: dts: r8a7794: Add L2 cache-controller node":
// a Cortex-A7 L2 "organized as 64 KiB x 8 ways").
// The replacement policy modelled for both is LRU: UNCONFIRMED, the TRM
// text on the policy could not be read this session; the checked
// microbenchmarks (streaming and cyclic walks) give the same counts under
// any policy that keeps the most recently filled lines.
//
// i.MX6Q: Cortex-A9 with a 32 KB 4-way L1 data cache with 32-byte lines
// and pseudo-random replacement (Cortex-A9 TRM r4p1, DDI 0388I, 7.1 "About
// the L1 memory system": "Both caches are 4-way set-associative", line
// "eight words", "Data cache replacement policy is pseudo random"), and a
// PL310 (L2C-310) of 1 MiB, 16 ways, 32-byte lines at 0x00A02000 (i.MX 6Dual/
// 6Quad RM rev. 6, 2.2 "ARM platform memory map"; L2C-310 TRM r3p3 2.1:
// 32-byte lines; board/sabrelite/l2.go checks AUX_CTRL's 16-way bit). Its
// replacement is round-robin, the AUX_CTRL bit 25 reset value (L2C-310 TRM
// 3.3.4; UNCONFIRMED this session), which the board does not change.
//
// i.MX7D: two Cortex-A7 with 32 KB L1 data caches and a shared 512 KB L2
// (i.MX 7Dual Applications Processor Reference Manual rev. 1, 1.2
// "Features", and its data sheet IMX7DCEC; the text was not re-read this
// session; the Cortex-A7 MPCore's L2 is configurable 128 KB to 1 MB,
// TRM r0p5 1.3 "Configurable options"); the L1 and L2 geometry and policy
// are the Cortex-A7's as for the i.MX6ULL. One core runs the firmware, so
// the model has one L1.
var CacheSoCs = map[string]CacheSoC{
	"imx6ull": {Name: "i.MX6ULL (Cortex-A7, L2 128 KiB)",
		L1: CacheLevel{32 << 10, 4, 64, "lru"}, L2: CacheLevel{128 << 10, 8, 64, "lru"}},
	"imx7d": {Name: "i.MX7D (Cortex-A7, L2 512 KiB)",
		L1: CacheLevel{32 << 10, 4, 64, "lru"}, L2: CacheLevel{512 << 10, 8, 64, "lru"},
		DeviceWindows: [][2]uint64{{pcie.IMX7D.MemBase, pcie.IMX7D.MemBase + pcie.IMX7D.MemSize}}},
	"imx6q": {Name: "i.MX6Q (Cortex-A9, PL310 1 MiB)",
		L1: CacheLevel{32 << 10, 4, 32, "random"}, L2: CacheLevel{1 << 20, 16, 32, "rr"},
		Outer: true, PL310Base: 0x00A02000},
}

// BoardSoC returns the CacheSoCs key of a firmware board.
func BoardSoC(board string) (string, error) {
	switch board {
	case "mx6ullevk", "usbarmory":
		return "imx6ull", nil
	case "sabrelite":
		return "imx6q", nil
	case "mcimx7d":
		return "imx7d", nil
	}
	return "", fmt.Errorf("qemu: no cache model for board %q", board)
}

// MemoryMap is a board's RAM layout (its board package's constants): the
// Go runtime's RAM and the buffer part of the DMA region are Write-Back
// cacheable; the DMA region's first CoherentSize bytes (descriptor rings)
// stay strongly ordered.
type MemoryMap struct {
	RAMStart, GoRAMSize, DMAStart, DMASize, CoherentSize uint64
}

// Cacheable returns the Write-Back ranges, [lo, hi) pairs.
func (m MemoryMap) Cacheable() [][2]uint64 {
	return [][2]uint64{{m.RAMStart, m.RAMStart + m.GoRAMSize}, {m.DMAStart + m.CoherentSize, m.DMAStart + m.DMASize}}
}

// boardMapFiles are the files declaring each board's memory constants.
var boardMapFiles = map[string]string{
	"mx6ullevk": "board/internal/imx6ulboard/imx6ulboard.go",
	"usbarmory": "board/internal/imx6ulboard/imx6ulboard.go",
	"sabrelite": "board/sabrelite/memmap.go",
	"mcimx7d":   "board/mcimx7d/memmap.go",
}

// BoardMemoryMap reads board's memory layout from its board package's
// source under root (the package builds only for TamaGo, so its constants
// are evaluated from the file with go/types rather than imported): the
// plugin's map is the firmware's, not a copy.
func BoardMemoryMap(root, board string) (MemoryMap, error) {
	file, ok := boardMapFiles[board]
	if !ok {
		return MemoryMap{}, fmt.Errorf("qemu: no memory map for board %q", board)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, file), nil, 0)
	if err != nil {
		return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: %w", board, err)
	}
	// The imports (TamaGo, the project's drivers) are not resolved: only
	// the constant declarations, which use none of them, are needed.
	conf := types.Config{Importer: noImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(f.Name.Name, fset, []*ast.File{f}, nil)
	var m MemoryMap
	for name, dst := range map[string]*uint64{"RAMStart": &m.RAMStart, "GoRAMSize": &m.GoRAMSize, "DMAStart": &m.DMAStart,
		"DMASize": &m.DMASize, "CoherentSize": &m.CoherentSize} {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok {
			return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: no constant %s in %s", board, name, file)
		}
		v, exact := constant.Uint64Val(c.Val())
		if !exact {
			return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: %s = %v is not a uint64", board, name, c.Val())
		}
		*dst = v
	}
	return m, nil
}

type noImporter struct{}

func (noImporter) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("not resolved: %s", path)
}

// maintenanceRoutines are the firmware's by-MVA maintenance routines
// (dma/cache_arm.s) and how the plugin derives their lines.
var maintenanceRoutines = map[string]string{
	"github.com/tamanic/tamanic/dma.dcacheClean":           "clean",
	"github.com/tamanic/tamanic/dma.dcacheInvalidate":      "inv",
	"github.com/tamanic/tamanic/dma.dcacheCleanInvalidate": "cleaninv",
	"github.com/tamanic/tamanic/dma.dcacheInvalidateRange": "invrange",
}

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

// CostConstants turn a transfer's counts into estimated core cycles:
//
//	cycles = insns × CPI + L1 read misses × L2Hit + L2 read misses × DRAMRead
//	       + lines written to DRAM × DRAMWrite + uncached accesses × Uncached
//	       + device register accesses × Device + maintenance line operations × Maint
//
// Store misses that the no-write-allocate mapping sends on to L2 or DRAM
// are not charged as stalls (the store buffer absorbs them); the lines
// they write to DRAM are, as bandwidth (DRAMWrite). Sources says where
// each constant comes from; none was fitted to a result.
type CostConstants struct {
	MHz      float64 // core clock
	LineRate float64 // the ENET's line rate, bit/s
	CPI      float64 // cycles per instruction with every access an L1 hit
	L2Hit    float64 // cycles an L1 read miss adds (L2 hit)
	DRAMRead float64 // cycles an L2 read miss adds
	// DRAMWrite is cycles per line written to DRAM (write-backs,
	// maintenance write-backs, merged write-through lines).
	DRAMWrite float64
	Uncached  float64 // cycles per access to strongly ordered RAM
	Device    float64 // cycles per device register access
	Maint     float64 // cycles per by-MVA or PL310 line operation
	Sources   map[string]string
}

// SoCCosts are the constants per CacheSoCs key.
//
// Cortex-A9 latencies: 7-cpu.com's Cortex-A9 page (Samsung Exynos 4210,
// dual Cortex-A9 at 1.2 GHz with a 1 MB 32-byte-line L2 behind the core,
// the same core and L2 arrangement as the i.MX6Q's PL310, LPDDR2-800):
// "64 K | 23 | + 19 (L2)", "+ 110 ns (RAM)", "RAM Read B/W (Parallel
// Random Read) = 68 ns / cache line". Not measured on an i.MX6Q (none was
// found this session): the i.MX6Q's DDR3-1066 MMDC is of the same
// generation. The Cortex-A7 rows take the same DRAM figures in
// nanoseconds (the i.MX6UL/ULL's MMDC is the i.MX6's controller, with
// DDR3L-800) and no published Cortex-A7 L2 latency was found: the A9's
// 19 cycles is used and marked so. CPI 1 is an assumption (both cores
// issue up to two instructions a cycle; no in-cache CPI for these SoCs was
// found), as is a strongly ordered or device access costing one DRAM
// round trip and a maintenance line operation one cycle plus its
// write-back (counted as a DRAM line). The sensitivity table (Sensitivity)
// shows how far each moves the answer.
var SoCCosts = map[string]CostConstants{
	"imx6ull": {MHz: 900, LineRate: 100e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 900, DRAMWrite: 0.068 * 900,
		Uncached: 0.110 * 900, Device: 0.110 * 900, Maint: 1, Sources: costSources("Cortex-A9 figure (no Cortex-A7 L2 latency found)")},
	"imx7d": {MHz: 1000, LineRate: 1000e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 1000, DRAMWrite: 0.068 * 1000,
		Uncached: 0.110 * 1000, Device: 0.110 * 1000, Maint: 1, Sources: imx7dSources()},
	"imx6q": {MHz: 996, LineRate: 400e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 996, DRAMWrite: 0.068 * 996,
		Uncached: 0.110 * 996, Device: 0.110 * 996, Maint: 1, Sources: costSources("7-cpu.com Cortex-A9 (Exynos 4210): +19 cycles")},
}

func costSources(l2 string) map[string]string {
	return map[string]string{
		"CPI":       "assumed 1 (dual-issue core; no published in-cache CPI found)",
		"L2Hit":     l2,
		"DRAMRead":  "7-cpu.com Cortex-A9 (Exynos 4210, LPDDR2-800): +110 ns",
		"DRAMWrite": "7-cpu.com Cortex-A9: 68 ns per line (read bandwidth, random)",
		"Uncached":  "assumed one DRAM round trip (110 ns)",
		"Device":    "assumed one DRAM round trip (110 ns)",
		"Maint":     "assumed 1 cycle per line (write-back charged as a DRAM line)",
		"MHz":       "i.MX6ULL 900 MHz part (MCIMX6Y2DVM09); i.MX6Q 996 MHz (SABRE Lite)",
		"LineRate":  "ENET 100 Mbit/s (i.MX6UL/ULL); i.MX6Q ~400 Mbit/s (ERR004512)",
	}
}

// imx7dSources: the i.MX7D's constants are the i.MX6ULL's Cortex-A7
// figures; its DDR controller (DDRC, DDR3L/LPDDR3) is not the i.MX6's
// MMDC, and no latency measured on it was found: the same 7-cpu.com
// nanoseconds are used and marked so.
func imx7dSources() map[string]string {
	s := costSources("Cortex-A9 figure (no Cortex-A7 L2 latency found)")
	s["DRAMRead"] = "7-cpu.com Cortex-A9 (Exynos 4210, LPDDR2-800): +110 ns; not measured on the i.MX7D's DDRC"
	s["MHz"] = "i.MX7D 1 GHz part (the MCIMX7D-SABRE's; i.MX 7Dual data sheet IMX7DCEC); the firmware does not set the clock"
	s["LineRate"] = "1 Gbit/s: the 82574L (1000BASE-T) and the i.MX7D's ENET (RGMII)"
	return s
}

// CostConstantNames are the constants Scaled knows, in the order tables
// show them. MHz is the core clock: scaling it scales the constants that
// are nanoseconds converted to cycles (DRAMRead, DRAMWrite, Uncached,
// Device) with it, not the ones that are core cycles (CPI, L2Hit, Maint),
// and moves the CPU load at line rate.
var CostConstantNames = []string{"CPI", "L2Hit", "DRAMRead", "DRAMWrite", "Uncached", "Device", "Maint", "MHz"}

// Scaled returns k with the named constant multiplied by f.
func (k CostConstants) Scaled(name string, f float64) CostConstants {
	switch name {
	case "MHz":
		k.MHz *= f
		k.DRAMRead *= f
		k.DRAMWrite *= f
		k.Uncached *= f
		k.Device *= f
	case "CPI":
		k.CPI *= f
	case "L2Hit":
		k.L2Hit *= f
	case "DRAMRead":
		k.DRAMRead *= f
	case "DRAMWrite":
		k.DRAMWrite *= f
	case "Uncached":
		k.Uncached *= f
	case "Device":
		k.Device *= f
	case "Maint":
		k.Maint *= f
	}
	return k
}

// MaintenanceOps is the number of line maintenance operations in c.
func (c CacheCounts) MaintenanceOps() float64 {
	return c["dccmvac"] + c["dcimvac"] + c["dccimvac"] + c["pl310_clean"] + c["pl310_inv"] + c["pl310_cleaninv"]
}

// Cycles estimates the core cycles of counts c.
func (k CostConstants) Cycles(c CacheCounts) float64 {
	return c["insns"]*k.CPI + c["l1_read_miss"]*k.L2Hit + c["l2_read_miss"]*k.DRAMRead + c["dram_write"]*k.DRAMWrite +
		(c["unc_read"]+c["unc_write"])*k.Uncached + (c["dev_read"]+c["dev_write"])*k.Device + c.MaintenanceOps()*k.Maint
}

// Load is the share of the core that cycles per MiB take at line rate.
func (k CostConstants) Load(cyclesPerMiB float64) float64 {
	return cyclesPerMiB * (k.LineRate / 8 / (1 << 20)) / (k.MHz * 1e6)
}

// SensitivityPairs are the ratios of two modes' estimates a sensitivity
// table shows, per direction, where both modes ran: bounce against sg,
// TamaGo's driver against sg on the same ENET, and the 82574L's and the
// ConnectX's segmentation offload against their scatter-gather.
var SensitivityPairs = [][2]string{{"bounce", "sg"}, {"tamago", "sg"}, {"e1000e-tso", "e1000e-sg"}, {"cx-tso", "cx-sg"}}

// Sensitivity writes, for each constant halved and doubled, every run's
// estimated cycles per MiB, the ratio of each pair of modes' estimates
// (num/den, e.g. bounce/sg) per direction for the pairs of which both
// modes ran, and the range of the runs' CPU load at line rate, as a
// Markdown table. runs hold counts per MiB.
func Sensitivity(w io.Writer, k CostConstants, runs []CostRun, pairs ...[2]string) {
	ran := map[string]bool{}
	for _, r := range runs {
		ran[r.Mode] = true
	}
	var shown [][2]string
	for _, p := range pairs {
		if ran[p[0]] && ran[p[1]] {
			shown = append(shown, p)
		}
	}
	fmt.Fprintf(w, "| constant | factor | %s |", runLabels(runs))
	for _, p := range shown {
		fmt.Fprintf(w, " %s/%s tx | %s/%s rx |", p[0], p[1], p[0], p[1])
	}
	fmt.Fprint(w, " CPU load at line rate, lowest–highest |\n|---|---|")
	for range runs {
		fmt.Fprint(w, "---|")
	}
	for range shown {
		fmt.Fprint(w, "---|---|")
	}
	fmt.Fprintln(w, "---|")
	row := func(name string, f float64, kk CostConstants) {
		fmt.Fprintf(w, "| %s | %g |", name, f)
		est := map[string]float64{}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range runs {
			c := kk.Cycles(r.Cache)
			est[r.Dir+":"+r.Mode] = c
			fmt.Fprintf(w, " %.2f M |", c/1e6)
			lo, hi = math.Min(lo, kk.Load(c)), math.Max(hi, kk.Load(c))
		}
		for _, p := range shown {
			for _, d := range []string{"tx", "rx"} {
				if a, b := est[d+":"+p[0]], est[d+":"+p[1]]; a > 0 && b > 0 {
					fmt.Fprintf(w, " %.3f |", a/b)
				} else {
					fmt.Fprint(w, " - |")
				}
			}
		}
		fmt.Fprintf(w, " %.1f–%.1f%% at %.0f MHz |\n", 100*lo, 100*hi, kk.MHz)
	}
	row("(as cited)", 1, k)
	for _, n := range CostConstantNames {
		for _, f := range []float64{0.5, 2} {
			row(n, f, k.Scaled(n, f))
		}
	}
}

func runLabels(runs []CostRun) string {
	var l []string
	for _, r := range runs {
		l = append(l, r.Dir+" "+r.Mode)
	}
	return strings.Join(l, " | ")
}
