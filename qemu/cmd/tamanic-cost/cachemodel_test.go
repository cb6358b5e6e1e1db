package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

// hostModel compiles plugin/cachemodel.c's model with its host driver
// (CACHEMODEL_HOST_TEST) and returns the binary, or skips without cc.
func hostModel(t *testing.T) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("no C compiler (cc): the cache model's C code cannot be built")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "cachemodel.c"), filepath.Join(dir, "cachemodel")
	if err := os.WriteFile(src, qemu.CachePluginSource, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Werror", "-DCACHEMODEL_HOST_TEST", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling the model: %v\n%s", err, out)
	}
	return bin
}

// runModel feeds the commands to the model and returns the counters after
// each "dump".
func runModel(t *testing.T, bin string, cmds []string) []map[string]uint64 {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("model: %v (commands %q...)", err, cmds[:min(len(cmds), 4)])
	}
	var dumps []map[string]uint64
	cur := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "end" {
			dumps = append(dumps, cur)
			cur = map[string]uint64{}
			continue
		}
		if len(f) != 2 {
			t.Fatalf("model output %q", sc.Text())
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		cur[f[0]] = v
	}
	return dumps
}

const (
	a7L1 = "l1 32768:4:64:lru"
	a7L2 = "l2 131072:8:64:lru"
)

func addr(a uint64) string { return fmt.Sprintf("%#x", a) }

// TestCacheModelLRUSet checks set indexing and LRU replacement: five lines
// of one set (a stride of sets x line = 8 KiB in the Cortex-A7's 32 KiB
// 4-way L1) fill its four ways, a touched line survives, the least recently
// used one is evicted.
func TestCacheModelLRUSet(t *testing.T) {
	bin := hostModel(t)
	const base, stride = 0x80100000, 32768 / 4
	line := func(i int) string { return addr(base + uint64(i)*stride) }
	cmds := []string{a7L1, a7L2}
	for i := 0; i < 4; i++ {
		cmds = append(cmds, "r "+line(i))
	}
	cmds = append(cmds, "r "+line(0), "r "+line(4), "dump 0", // 0 hits; 4 evicts 1
		"r "+line(1), "dump 0", // 1 misses again (evicts 2, now the oldest)
		"r "+line(0), "r "+line(3), "r "+line(4), "dump 0", // all three hit
		"r "+line(2), "dump 0") // 2 was evicted
	d := runModel(t, bin, cmds)
	want := []struct{ hit, miss uint64 }{{1, 5}, {1, 6}, {4, 6}, {4, 7}}
	for i, w := range want {
		if d[i]["l1_read_hit"] != w.hit || d[i]["l1_read_miss"] != w.miss {
			t.Errorf("dump %d: L1 hits %d misses %d, want %d, %d", i, d[i]["l1_read_hit"], d[i]["l1_read_miss"], w.hit, w.miss)
		}
	}
	// Five distinct lines in one set of the 8-way L2 (a 2 KiB-set stride
	// divides 8 KiB) all stay in L2: the re-read of 1 and 2 hit there.
	if d[3]["l2_read_miss"] != 5 || d[3]["l2_read_hit"] != 2 {
		t.Errorf("L2 misses %d hits %d, want 5, 2", d[3]["l2_read_miss"], d[3]["l2_read_hit"])
	}
}

// TestCacheModelStreaming checks the analytical miss count of a walk
// larger than L2: every line misses both levels on both passes (LRU keeps
// nothing of a cyclic walk larger than the cache), and a walk that fits
// L2 but not L1 hits L2 on the second pass.
func TestCacheModelStreaming(t *testing.T) {
	bin := hostModel(t)
	walk := func(size uint64) []string {
		var c []string
		for a := uint64(0); a < size; a += 64 {
			c = append(c, "r "+addr(0x81000000+a))
		}
		return c
	}
	big := append(append(append([]string{a7L1, a7L2}, walk(256<<10)...), walk(256<<10)...), "dump 0")
	d := runModel(t, bin, big)[0]
	if n := uint64(2 * (256 << 10) / 64); d["l1_read_miss"] != n || d["l2_read_miss"] != n || d["dram_read"] != n {
		t.Errorf("256 KiB twice: L1 misses %d, L2 misses %d, DRAM reads %d; want %d each", d["l1_read_miss"], d["l2_read_miss"], d["dram_read"], n)
	}
	mid := append(append(append([]string{a7L1, a7L2}, walk(64<<10)...), walk(64<<10)...), "dump 0")
	d = runModel(t, bin, mid)[0]
	if n := uint64((64 << 10) / 64); d["l1_read_miss"] != 2*n || d["l2_read_miss"] != n || d["l2_read_hit"] != n {
		t.Errorf("64 KiB twice: L1 misses %d, L2 misses %d hits %d; want %d, %d, %d", d["l1_read_miss"], d["l2_read_miss"], d["l2_read_hit"], 2*n, n, n)
	}
}

// TestCacheModelWrites checks the two write policies: without write
// allocation (TamaGo's TEX=000 C=1 B=1 mapping) a store miss goes to DRAM,
// consecutive stores to one line merging into one write; with it, the line
// is filled, made dirty and written back when evicted.
func TestCacheModelWrites(t *testing.T) {
	bin := hostModel(t)
	d := runModel(t, bin, []string{a7L1, a7L2, "w 0x80200000", "w 0x80200004", "w 0x80200040", "dump 0"})[0]
	if d["l1_write_miss"] != 3 || d["dram_write"] != 2 || d["wt_lines"] != 2 || d["dram_read"] != 0 {
		t.Errorf("no write-allocate: %v", d)
	}
	const stride = 32768 / 4
	cmds := []string{a7L1, a7L2, "wa 1", "w 0x80200000"}
	for i := 1; i <= 4; i++ {
		cmds = append(cmds, "r "+addr(0x80200000+uint64(i)*stride))
	}
	cmds = append(cmds, "dump 0")
	d = runModel(t, bin, cmds)[0]
	if d["l1_write_miss"] != 1 || d["dram_read"] != 5 || d["l1_evict_wb"] != 1 || d["l2_write_hit"] != 1 || d["dram_write"] != 0 {
		t.Errorf("write-allocate then eviction: %v", d)
	}
}

// TestCacheModelMaintenance checks the by-MVA operations on the Cortex-A7
// (to the point of coherency: through its L2 to DRAM) and, with an outer
// PL310, that they stop at L1 and the PL310's by-PA registers act on L2.
func TestCacheModelMaintenance(t *testing.T) {
	bin := hostModel(t)
	d := runModel(t, bin, []string{a7L1, a7L2, "wa 1", "w 0x80300000", "clean 0x80300000", "clean 0x80300000", "dump 0",
		"inv 0x80300000", "r 0x80300000", "dump 0"})
	if d[0]["dccmvac"] != 2 || d[0]["maint_l1_wb"] != 1 || d[0]["dram_write"] != 1 || d[0]["maint_l2_wb"] != 0 {
		t.Errorf("A7 clean: %v", d[0])
	}
	if d[1]["dcimvac"] != 1 || d[1]["l1_read_miss"] != 1 || d[1]["l2_read_miss"] != 2 {
		t.Errorf("A7 invalidate reaches L1 and L2: %v", d[1])
	}
	a9 := []string{"l1 32768:4:32:random", "l2 1048576:16:32:rr", "outer 1", "wa 1"}
	d = runModel(t, bin, append(a9, "w 0x10300000", "clean 0x10300000", "dump 0", "pclean 0x10300000", "pclean 0x10300000", "dump 0",
		"inv 0x10300000", "r 0x10300000", "dump 0", "pinv 0x10300000", "inv 0x10300000", "r 0x10300000", "dump 0"))
	if d[0]["maint_l1_wb"] != 1 || d[0]["l2_write_hit"] != 1 || d[0]["dram_write"] != 0 {
		t.Errorf("A9 clean stops at the PL310: %v", d[0])
	}
	if d[1]["pl310_clean"] != 2 || d[1]["maint_l2_wb"] != 1 || d[1]["dram_write"] != 1 {
		t.Errorf("PL310 clean by PA: %v", d[1])
	}
	if d[2]["l1_read_miss"] != 1 || d[2]["l2_read_hit"] != 1 {
		t.Errorf("A9 invalidate leaves the PL310's line: %v", d[2])
	}
	if d[3]["pl310_inv"] != 1 || d[3]["l1_read_miss"] != 2 || d[3]["l2_read_miss"] != 2 {
		t.Errorf("PL310 invalidate by PA: %v", d[3])
	}
}

// TestCacheModelPolicies checks round-robin (one counter for all sets) and
// that the pseudo-random choice is repeatable and spreads over the ways.
func TestCacheModelPolicies(t *testing.T) {
	bin := hostModel(t)
	// A 4-line, 4-way, 1-set cache: round-robin evicts ways 0,1,2,3 in
	// turn whatever was touched, so after filling and touching line 0,
	// line 4 evicts line 0.
	cmds := []string{"l1 256:4:64:rr", a7L2}
	for i := 0; i < 4; i++ {
		cmds = append(cmds, "r "+addr(uint64(i)*64))
	}
	cmds = append(cmds, "r 0x0", "r 0x100", "r 0x0", "dump 0")
	d := runModel(t, bin, cmds)[0]
	if d["l1_read_miss"] != 6 || d["l1_read_hit"] != 1 {
		t.Errorf("round-robin: %v", d)
	}
	rnd := []string{"l1 256:4:64:random", a7L2}
	for i := 0; i < 400; i++ {
		rnd = append(rnd, "r "+addr(uint64(i%5)*64))
	}
	rnd = append(rnd, "dump 0")
	a, b := runModel(t, bin, rnd)[0], runModel(t, bin, rnd)[0]
	if a["l1_read_miss"] != b["l1_read_miss"] {
		t.Errorf("pseudo-random replacement is not repeatable: %d, %d misses", a["l1_read_miss"], b["l1_read_miss"])
	}
	// Five lines cycling through four ways: LRU would miss every time
	// (400); random replacement keeps some.
	if m := a["l1_read_miss"]; m <= 5 || m >= 400 {
		t.Errorf("pseudo-random: %d misses of 400, want between", m)
	}
}
