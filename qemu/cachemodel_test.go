package qemu

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

//go:embed cmd/tamanic-cost/plugin/icprof.c
var icprofSource []byte

// TestCacheModelCounts boots firmware/cachebench under the cache model
// plugin (and tamanic-cost's exact instruction profiler, icprof) and checks
// each phase's counters against what the i.MX6ULL's caches must do
// (firmware/cachebench says what each phase is): the misses and the
// maintenance operations within 5% of the analytical count, and the
// plugin's instruction total within 1% of icprof's.
func TestCacheModelCounts(t *testing.T) {
	elf := firmware(t, "cachebench")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("skipping the cache model test: no C compiler (cc) for its QEMU plugins")
	}
	dir := t.TempDir()
	root, _ := filepath.Abs("..")
	p, err := NewCachePlugin(root, dir, elf, "mx6ullevk", "main.mark")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	icSrc, icSo, icDump := filepath.Join(dir, "icprof.c"), filepath.Join(dir, "icprof.so"), filepath.Join(dir, "icprof.dump")
	if err := os.WriteFile(icSrc, icprofSource, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", icSo, icSrc, "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("compiling icprof: %v\n%s", err, out)
	}
	args := append(p.QEMUArgs("512M"), "-plugin", icSo+",out="+icDump)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk", Args: args, ReadyTimeout: 150 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	ic, err := icprofTotal(icDump)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Now["insns"]; math.Abs(got-ic) > 0.01*ic {
		t.Errorf("instructions: cache model %.0f, icprof %.0f (more than 1%% apart)", got, ic)
	}
	if len(s.Marks) != 8 {
		t.Fatalf("%d marks snapshotted, want 8\n%s", len(s.Marks), m.Console())
	}
	for _, k := range []string{"pa_mismatch", "no_hwaddr", "mva_unknown", "mva_mismatch", "mva_leftover", "marks_dropped"} {
		if v := s.Now[k]; v != 0 {
			t.Errorf("%s = %.0f, want 0", k, v)
		}
	}
	const line = 64
	type want struct {
		counter string
		n       float64
	}
	phases := []struct {
		name string
		want []want
	}{
		{"copy 512 KiB", []want{{"l1_read_miss", 512 << 10 / line}, {"l2_read_miss", 512 << 10 / line}, {"wt_lines", 512 << 10 / line}}},
		{"walk 256 KiB x2", []want{{"l1_read_miss", 2 * 256 << 10 / line}, {"l2_read_miss", 2 * 256 << 10 / line}}},
		{"walk 64 KiB x4", []want{{"l1_read_miss", 4 * 64 << 10 / line}, {"l2_read_miss", 64 << 10 / line}, {"l2_read_hit", 3 * 64 << 10 / line}}},
		{"dirty and clean 16 KiB", []want{{"l1_read_miss", 16 << 10 / line}, {"dccmvac", 16 << 10 / line}, {"maint_l1_wb", 16 << 10 / line}}},
		{"clean again", []want{{"dccmvac", 16 << 10 / line}, {"maint_l1_wb", 0}}},
		{"invalidate range", []want{{"dccimvac", 2}, {"dcimvac", 16<<10/line - 2}, {"inv_dirty", 0}}},
		// The invalidate-address check: every line written and not
		// cleaned, then invalidated (dirty in L1 only: the reads
		// filled L2 clean).
		{"invalidate dirty lines", []want{{"dcimvac", 16 << 10 / line}, {"inv_dirty", 16 << 10 / line}}},
	}
	for i, ph := range phases {
		d := s.Marks[i+1].Sub(s.Marks[i])
		for _, w := range ph.want {
			got := d[w.counter]
			if math.Abs(got-w.n) > 0.05*w.n+0.5 {
				t.Errorf("%s: %s = %.0f, want %.0f within 5%%", ph.name, w.counter, got, w.n)
			}
		}
		t.Logf("%s: %.0f instructions, L1 read misses %.0f, L2 read misses %.0f, DRAM lines read %.0f written %.0f, maintenance %.0f",
			ph.name, d["insns"], d["l1_read_miss"], d["l2_read_miss"], d["dram_read"], d["dram_write"], d["dccmvac"]+d["dcimvac"]+d["dccimvac"])
	}
}

// icprofTotal asks icprof for its counters and sums the instructions.
func icprofTotal(dump string) (float64, error) {
	if err := os.WriteFile(dump+".req", nil, 0o644); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dump + ".req"); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
	}
	f, err := os.Open(dump)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total := 0.0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 2 {
			continue
		}
		n, err := strconv.ParseUint(fs[1], 10, 64)
		if err != nil {
			return 0, err
		}
		total += float64(n)
	}
	return total, sc.Err()
}

// TestCacheModelMemoryMap checks that the plugin's map is read from the
// board packages' constants.
func TestCacheModelMemoryMap(t *testing.T) {
	root, _ := filepath.Abs("..")
	m, err := BoardMemoryMap(root, "mx6ullevk")
	if err != nil {
		t.Fatal(err)
	}
	if m.RAMStart != 0x80000000 || m.GoRAMSize != 480<<20 || m.DMAStart != 0x9E000000 || m.DMASize != 32<<20 || m.CoherentSize != 1<<20 {
		t.Errorf("mx6ullevk: %+v", m)
	}
	s, err := BoardMemoryMap(root, "sabrelite")
	if err != nil {
		t.Fatal(err)
	}
	if s.RAMStart != 0x10000000 || s.DMAStart != 0x10000000+480<<20 || s.DMASize != 96<<20 {
		t.Errorf("sabrelite: %+v", s)
	}
	if _, err := BoardMemoryMap(root, "nosuchboard"); err == nil {
		t.Error("an unknown board has a memory map")
	}
}

// TestCacheModelPL310StoreValue checks how the plugin recovers the value
// of a PL310 maintenance store, which QEMU 7.2's plugin API does not show
// (and its sabrelite, having no PL310, never makes): a bare-metal stub
// does what the firmware's atomic store does, a word loaded from the stack
// and then a literal loaded from the code before the store, to a device
// region standing in for the PL310 (the i.MX6UL's SDMA block, which QEMU
// 7.2 leaves unimplemented: writes are ignored). The line must be cleaned
// by PA, not refused as a bad value (the literal was taken for it before).
func TestCacheModelPL310StoreValue(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	_, errQ := exec.LookPath("qemu-system-arm")
	_, errC := exec.LookPath(cc)
	if errQ != nil || errC != nil {
		t.Skip("skipping the PL310 store test: needs qemu-system-arm and a C compiler (cc)")
	}
	dir := t.TempDir()
	src, so := filepath.Join(dir, "cachemodel.c"), filepath.Join(dir, "cachemodel.so")
	if err := os.WriteFile(src, CachePluginSource, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src, "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("compiling the plugin: %v\n%s", err, out)
	}
	const base = 0x020EC000
	stub := []uint32{
		0xe59f0028, // LDR R0, [PC, #0x28]: the line, 0x80100040
		0xe59f1028, // LDR R1, [PC, #0x28]: the stand-in PL310
		0xe59fd028, // LDR SP, [PC, #0x28]: a stack
		0xe58d0004, // STR R0, [SP, #4]: an argument slot
		0xe59d2004, // LDR R2, [SP, #4]: the value, from the stack
		0xe59f3020, // LDR R3, [PC, #0x20]: a literal, as atomic.Store's
		0xe58127b0, // STR R2, [R1, #0x7B0]: CLEAN_LINE_PA
		0xeafffffe, // B .
		0, 0, 0, 0,
		0x80100040, base, 0x80200000, 0x12345678,
	}
	img := make([]byte, 4*len(stub))
	for i, w := range stub {
		binary.LittleEndian.PutUint32(img[4*i:], w)
	}
	kernel, ram, dump := filepath.Join(dir, "stub.bin"), filepath.Join(dir, "ram"), filepath.Join(dir, "dump")
	if err := os.WriteFile(kernel, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ram, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &CachePlugin{dump: dump}
	cmd := exec.Command("qemu-system-arm", "-machine", "mcimx6ul-evk", "-cpu", "cortex-a7", "-m", "512M",
		"-nographic", "-monitor", "none", "-serial", "null",
		"-object", "memory-backend-file,id=tamanic-ram,size=512M,mem-path="+ram+",share=on", "-machine", "memory-backend=tamanic-ram",
		"-plugin", so+",out="+dump+",l1=32768:4:32:random,l2=1048576:16:32:rr,outer=1,wa=0,"+
			fmt.Sprintf("pl310=%#x,ram=%s@0x80000000,wb=0x80000000-0x9e000000", base, ram),
		"-kernel", kernel)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var s CacheSnapshot
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s, err = p.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if s.Now["dev_write"] > 0 || time.Now().After(deadline) {
			break
		}
	}
	if s.Now["pl310_clean"] != 1 || s.Now["pl310_bad"] != 0 {
		t.Errorf("PL310 clean by PA: %v applied, %v refused; want 1, 0", s.Now["pl310_clean"], s.Now["pl310_bad"])
	}
}
