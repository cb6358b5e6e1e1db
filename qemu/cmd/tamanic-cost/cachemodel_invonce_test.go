package main

import "testing"

// TestCacheModelInvalidateDirtyOnce checks that one DCIMVAC on the
// Cortex-A7, whose integrated L2 lies inside the point of coherency so the
// one operation invalidates the line at both levels, counts as one
// invalidation that discarded data (inv_dirty is "line invalidations that
// discarded data the CPU wrote", tamanic-cost's warning), not two, when
// both levels held the line dirty: the L1's newer copy and the L2's older
// one are the same line's data, lost once.
func TestCacheModelInvalidateDirtyOnce(t *testing.T) {
	bin := hostModel(t)
	const x = 0x80400000
	c := []string{a7L1, a7L2, "wa 1", "w " + addr(x)}
	for k := uint64(1); k <= 4; k++ {
		c = append(c, "r "+addr(x+k*8192)) // same L1 set: evicts x, dirty, to L2
	}
	c = append(c, "w "+addr(x), "inv "+addr(x), "dump 0") // x dirty in L1 again, and in L2
	d := runModel(t, bin, c)[0]
	if d["dcimvac"] != 1 || d["inv_dirty"] != 1 {
		t.Errorf("one DCIMVAC of a line dirty in L1 and L2: dcimvac %d, inv_dirty %d, want 1 and 1", d["dcimvac"], d["inv_dirty"])
	}
}
