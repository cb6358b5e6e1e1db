package tzplan

import (
	"sort"
	"testing"
)

// TestSlotRangesCoverClosedSlots: every block ClosedSlots names has
// address ranges, each inside the 32-bit space and, for peripherals, inside
// the AIPS windows (0x0200_0000-0x022F_FFFF, IMX6ULLRM Table 2-1) or OCRAM;
// ranges of different slots overlap only where SlotRanges says they do
// (the SNVS LP registers).
func TestSlotRangesCoverClosedSlots(t *testing.T) {
	table := SlotRanges()
	for _, c := range ClosedSlots() {
		rs := table[c.Block]
		if len(rs) == 0 {
			t.Errorf("closed slot %s (CSL%d slot %d) has no address ranges in SlotRanges", c.Block, c.At.CSL, c.At.Slot)
		}
		r, w := NormalDenies(c.Level)
		if !r && !w {
			t.Errorf("closed slot %s at level %#x denies the Normal World nothing", c.Block, c.Level)
		}
	}
	type span struct {
		slot string
		r    Range
	}
	var all []span
	for slot, rs := range table {
		for _, r := range rs {
			if r.Size == 0 || r.End() > 1<<32 {
				t.Errorf("%s: %s %#x+%#x is empty or wraps", slot, r.Block, r.Base, r.Size)
			}
			aips := r.Base >= 0x02000000 && r.End() <= 0x02300000
			ocram := r.Base >= 0x00900000 && r.End() <= 0x00980000 // OCRAM and its alias
			if !aips && !ocram {
				t.Errorf("%s: %s %#x+%#x outside the AIPS windows and OCRAM", slot, r.Block, r.Base, r.Size)
			}
			all = append(all, span{slot, r})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r.Base < all[j].r.Base })
	for i := range all {
		for j := i + 1; j < len(all) && uint64(all[j].r.Base) < all[i].r.End(); j++ {
			a, b := all[i], all[j]
			snvs := map[string]bool{a.r.Block: true, b.r.Block: true}
			if a.slot == b.slot || !(snvs["SNVS"] && snvs["SNVS LP registers"]) {
				t.Errorf("%s (%s) and %s (%s) overlap", a.r.Block, a.slot, b.r.Block, b.slot)
			}
		}
	}
}

// TestNormalDenies checks the CSL decoding against the plan's levels: a
// Secure-only slot refuses both directions, a read-only one writes only,
// an open one nothing.
func TestNormalDenies(t *testing.T) {
	for _, c := range []struct {
		level       uint32
		read, write bool
	}{{CSLSecure, true, true}, {CSLNSReadOnly, false, true}, {CSLAll, false, false}} {
		if r, w := NormalDenies(c.level); r != c.read || w != c.write {
			t.Errorf("NormalDenies(%#x) = %v, %v; want %v, %v", c.level, r, w, c.read, c.write)
		}
	}
}
