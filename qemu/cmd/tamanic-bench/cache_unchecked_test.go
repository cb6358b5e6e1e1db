package main

import (
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

// TestCacheModelReportUnmodelled checks that the invalidate-address
// check's cell does not read as complete when the model saw maintenance it
// counts but does not apply, or accesses it could not place: a set/way
// operation (DCISW discards dirty lines by set and way; DCCSW and DCCISW
// clean lines the model still holds dirty), the PL310's by-way operations
// (Invalidate by Way at 0x77C discards every dirty line of the ways: L2C-310
// TRM r3p3, 3.3 register summary; Linux cache-l2x0.h L2X0_INV_WAY), DCCMVAU
// (a clean to the point of unification the model does not apply), and an
// access QEMU gave no physical address for (no_hwaddr: not modelled at all).
// After any of them the model's dirty state is not silicon's, so its 0 is
// not a verdict. tamanic-cost's own warning (printCache) already names
// them.
func TestCacheModelReportUnmodelled(t *testing.T) {
	for _, counter := range []string{"setway", "pl310_way", "dccmvau", "no_hwaddr"} {
		c := qemu.CacheCounts{"insns": 1e6, counter: 2}
		if got := invChecked(c); !strings.Contains(got, "unchecked") {
			t.Errorf("%s = 2: the invalidate-address check reads %q, as if complete", counter, got)
		}
	}
	if got := invChecked(qemu.CacheCounts{"insns": 1e6}); got != "0.0" {
		t.Errorf("nothing unplaced: %q, want 0.0", got)
	}
}
