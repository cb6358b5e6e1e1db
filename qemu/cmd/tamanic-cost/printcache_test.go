package main

import (
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

// TestCacheModelWarnsUnmodelled checks that a transfer's printout warns of
// every kind of access or maintenance the model counts but could not place
// or does not apply, among them loads and stores QEMU gave no physical
// address for (no_hwaddr), which the model skipped entirely.
func TestCacheModelWarnsUnmodelled(t *testing.T) {
	for counter, label := range map[string]string{"mva_unknown": "mva_unknown", "mva_mismatch": "mva_mismatch", "mva_leftover": "mva_leftover",
		"pl310_bad": "pl310_bad", "pa_mismatch": "pa_mismatch", "setway": "set/way", "dccmvau": "DCCMVAU", "pl310_way": "PL310 by way",
		"no_hwaddr": "no_hwaddr"} {
		var b strings.Builder
		printCache(&b, qemu.SoCCosts["imx6ull"], qemu.CostRun{Cache: qemu.CacheCounts{"insns": 1e6, counter: 3}})
		if !strings.Contains(b.String(), "WARNING: maintenance or accesses the model could not place") || !strings.Contains(b.String(), label+" 3.0") {
			t.Errorf("%s = 3 per MiB: no warning naming it:\n%s", counter, b.String())
		}
	}
}
