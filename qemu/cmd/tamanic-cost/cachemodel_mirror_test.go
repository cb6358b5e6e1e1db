package main

import (
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

// TestCacheModelWriteMergeExpiresOnRefill: a store miss without write
// allocation merges with the previous one only while that write can still
// be in the store buffer. Here the line is written, then read back from
// DRAM (the fill drains the first write before it: a core's read returns
// its own earlier write), then evicted from L1 and L2, then written again:
// two DRAM writes, not one.
func TestCacheModelWriteMergeExpiresOnRefill(t *testing.T) {
	bin := hostModel(t)
	const x = 0x80400000
	cmds := []string{a7L1, a7L2, "w " + addr(x), "r " + addr(x)}
	// Same L1 set (8 KiB stride) and same L2 set (16 KiB stride): eight
	// other lines push x out of the 8-way L2 and the 4-way L1.
	for k := uint64(1); k <= 8; k++ {
		cmds = append(cmds, "r "+addr(x+k*16384))
	}
	cmds = append(cmds, "w "+addr(x), "dump 0")
	d := runModel(t, bin, cmds)[0]
	if d["wt_lines"] != 2 || d["dram_write"] != 2 {
		t.Errorf("store, refill, eviction, store: %d write-through lines, %d DRAM writes; want 2, 2", d["wt_lines"], d["dram_write"])
	}
	// Consecutive stores with nothing between still merge.
	d = runModel(t, bin, []string{a7L1, a7L2, "w " + addr(x), "w " + addr(x+4), "w " + addr(x+8), "dump 0"})[0]
	if d["wt_lines"] != 1 || d["dram_write"] != 1 {
		t.Errorf("three stores to one line: %d write-through lines, %d DRAM writes; want 1, 1", d["wt_lines"], d["dram_write"])
	}
}

// TestCacheModelPL310MirrorCost: with pl310mirror (QEMU 7.2's sabrelite
// has no PL310) each by-MVA range operation gets what dma.TwoLevel does on
// the i.MX6Q with one: per line one strongly ordered store to the PL310's
// by-PA register (dma/pl310.go lineOp, Invalidate), a second inner pass
// for an invalidate (TwoLevel.Invalidate), and per range one CACHE_SYNC
// store and at least one read of it (PL310.Sync). Each of those accesses
// is a device access and costs SoCCosts' Device, so a mirrored line costs
// at least that.
func TestCacheModelPL310MirrorCost(t *testing.T) {
	bin := hostModel(t)
	a9 := []string{"l1 32768:4:32:random", "l2 1048576:16:32:rr", "outer 1"}
	const b = 0x10300000
	// A clean of 4 lines.
	cmds := append([]string{}, a9...)
	for i := uint64(0); i < 4; i++ {
		cmds = append(cmds, "mclean "+addr(b+32*i))
	}
	cmds = append(cmds, "msync 0", "dump 0")
	// An invalidate of [b+8, b+4*32+8): partial first and last lines
	// (clean and invalidate), three whole lines between.
	cmds = append(cmds, "mpartial "+addr(b), "mpartial "+addr(b+4*32))
	for i := uint64(1); i < 4; i++ {
		cmds = append(cmds, "minv "+addr(b+32*i))
	}
	cmds = append(cmds, "msync 0", "dump 0")
	d := runModel(t, bin, cmds)
	clean := d[0]
	if clean["dccmvac"] != 4 || clean["pl310_clean"] != 4 || clean["dev_write"] != 5 || clean["dev_read"] != 1 ||
		clean["pl310_sync"] != 1 || clean["pl310_mirror_dev"] != 6 {
		t.Errorf("mirrored clean of 4 lines: %v", clean)
	}
	inv := map[string]uint64{}
	for k, v := range d[1] {
		inv[k] = v - clean[k]
	}
	// Two passes over 5 lines (2 partial, 3 whole), 5 PL310 stores + sync.
	if inv["dccimvac"] != 4 || inv["dcimvac"] != 6 || inv["pl310_cleaninv"] != 2 || inv["pl310_inv"] != 3 ||
		inv["dev_write"] != 6 || inv["dev_read"] != 1 || inv["pl310_mirror_dev"] != 7 {
		t.Errorf("mirrored invalidate of 2 partial and 3 whole lines: %v", inv)
	}
	k := qemu.SoCCosts["imx6q"]
	for _, op := range []struct {
		name  string
		c     map[string]uint64
		lines float64
	}{{"clean", clean, 4}, {"invalidate", inv, 5}} {
		cc := qemu.CacheCounts{}
		for n, v := range op.c {
			cc[n] = float64(v)
		}
		if got := k.Cycles(cc) / op.lines; got < k.Device {
			t.Errorf("%s: a mirrored line costs %.2f cycles; its register store alone is a device access, %.2f", op.name, got, k.Device)
		}
	}
}

// TestCacheModelInvalidateDirty is the invalidate-address check: an
// invalidate without clean (DCIMVAC, the PL310's 0x770) of a line holding
// data the CPU wrote and did not clean discards that data on silicon
// (ARMv7 ARM: an invalidate may lose dirty data; cachemodel.c l2_op), so
// the model counts it (inv_dirty), once per operation that discarded
// dirty data (TestCacheModelInvalidateDirtyOnce). A clean first, a clean and invalidate, or a line only read, is
// not counted.
func TestCacheModelInvalidateDirty(t *testing.T) {
	bin := hostModel(t)
	const x = 0x80400000
	a9 := []string{"l1 32768:4:32:random", "l2 1048576:16:32:rr", "outer 1"}
	for _, tc := range []struct {
		name string
		cmds []string
		want uint64
	}{
		{"A7: written, invalidated", []string{a7L1, a7L2, "wa 1", "w " + addr(x), "inv " + addr(x)}, 1},
		{"A7: written, cleaned, invalidated", []string{a7L1, a7L2, "wa 1", "w " + addr(x), "clean " + addr(x), "inv " + addr(x)}, 0},
		{"A7: written, cleaned and invalidated", []string{a7L1, a7L2, "wa 1", "w " + addr(x), "cleaninv " + addr(x)}, 0},
		{"A7: read, invalidated", []string{a7L1, a7L2, "r " + addr(x), "inv " + addr(x)}, 0},
		// No write allocation: a store that hits L1 dirties it.
		{"A7 no-WA: read, written, invalidated", []string{a7L1, a7L2, "r " + addr(x), "w " + addr(x+4), "inv " + addr(x)}, 1},
		// The core's own L2 (to the point of coherency): dirty in L2
		// only, after an L1 eviction, is lost too.
		{"A7: dirty in L2 only", func() []string {
			c := []string{a7L1, a7L2, "wa 1", "w " + addr(x)}
			for k := uint64(1); k <= 4; k++ {
				c = append(c, "r "+addr(x+k*8192)) // same L1 set: evicts x to L2
			}
			return append(c, "inv "+addr(x))
		}(), 1},
		// A9 + PL310: the CP15 invalidate reaches L1 only; the PL310's
		// invalidate of a line the L1 cleaned to it (dirty in L2).
		{"A9: L1 dirty, DCIMVAC", append(append([]string{}, a9...), "wa 1", "w "+addr(x), "inv "+addr(x)), 1},
		{"A9: cleaned to L2, PL310 invalidate", append(append([]string{}, a9...), "wa 1", "w "+addr(x), "clean "+addr(x), "pinv "+addr(x)), 1},
		{"A9: cleaned to L2, PL310 clean, invalidate", append(append([]string{}, a9...), "wa 1", "w "+addr(x), "clean "+addr(x), "pclean "+addr(x), "pinv "+addr(x)), 0},
	} {
		d := runModel(t, bin, append(tc.cmds, "dump 0"))[0]
		if d["inv_dirty"] != tc.want {
			t.Errorf("%s: inv_dirty %d, want %d", tc.name, d["inv_dirty"], tc.want)
		}
	}
}
