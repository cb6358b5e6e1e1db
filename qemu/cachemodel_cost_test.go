package qemu

import (
	"math"
	"strings"
	"testing"
)

// TestCacheModelCostEstimate checks the estimate's terms one by one, the
// CPU load at line rate, and that the sensitivity table halves and doubles
// each constant alone.
func TestCacheModelCostEstimate(t *testing.T) {
	k := CostConstants{MHz: 1000, LineRate: 8 << 20, CPI: 1, L2Hit: 10, DRAMRead: 100, DRAMWrite: 50, Uncached: 200, Device: 300, Maint: 2}
	c := CacheCounts{"insns": 1000, "l1_read_miss": 10, "l2_read_miss": 3, "dram_write": 4, "unc_read": 1, "unc_write": 1,
		"dev_read": 2, "dccmvac": 5, "dcimvac": 1, "dccimvac": 1, "pl310_clean": 3, "l1_write_miss": 99, "l1_read_hit": 500}
	want := 1000.0 + 10*10 + 3*100 + 4*50 + 2*200 + 2*300 + 10*2
	if got := k.Cycles(c); got != want {
		t.Errorf("cycles %v, want %v", got, want)
	}
	// 1 MiB/s of line rate (8 Mibit/s) at 1000 MHz: cycles per MiB / 1e9.
	if got := k.Load(5e8); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("load %v, want 0.5", got)
	}
	for _, n := range CostConstantNames {
		base := k.Cycles(c)
		d := k.Scaled(n, 2).Cycles(c) - base
		h := base - k.Scaled(n, 0.5).Cycles(c)
		if d <= 0 || math.Abs(d-2*h) > 1e-9 {
			t.Errorf("%s: doubling adds %v, halving removes %v", n, d, h)
		}
	}
	// The clock: nanosecond constants scale with it, cycle ones do not.
	f := k.Scaled("MHz", 2)
	if f.MHz != 2000 || f.DRAMRead != 200 || f.DRAMWrite != 100 || f.Uncached != 400 || f.Device != 600 ||
		f.CPI != k.CPI || f.L2Hit != k.L2Hit || f.Maint != k.Maint {
		t.Errorf("MHz x2: %+v", f)
	}
	runs := []CostRun{{Dir: "tx", Mode: "bounce", Cache: c}, {Dir: "tx", Mode: "sg", Cache: CacheCounts{"insns": 1000}}}
	var b strings.Builder
	Sensitivity(&b, k, runs, SensitivityPairs...)
	out := b.String()
	if n := strings.Count(out, "\n"); n != 2+1+2*len(CostConstantNames) {
		t.Errorf("%d table lines:\n%s", n, out)
	}
	if !strings.Contains(out, "| (as cited) | 1 | 0.00 M | 0.00 M | 2.620 | - |") {
		t.Errorf("as-cited row missing:\n%s", out)
	}
	if !strings.Contains(out, "| CPI | 2 | 0.00 M | 0.00 M | 1.810 | - |") {
		t.Errorf("CPI x2 row missing:\n%s", out)
	}
	// A pair is shown where both of its modes ran, and only then.
	b.Reset()
	Sensitivity(&b, k, []CostRun{{Dir: "tx", Mode: "e1000e-sg", Cache: c}, {Dir: "tx", Mode: "e1000e-tso", Cache: CacheCounts{"insns": 1000}},
		{Dir: "rx", Mode: "tamago", Cache: c}}, SensitivityPairs...)
	head, _, _ := strings.Cut(b.String(), "\n")
	if !strings.Contains(head, "| e1000e-tso/e1000e-sg tx | e1000e-tso/e1000e-sg rx |") || strings.Contains(head, "bounce/sg") || strings.Contains(head, "tamago/sg") {
		t.Errorf("ratio columns: %s", head)
	}
	if !strings.Contains(b.String(), "| (as cited) | 1 | 0.00 M | 0.00 M | 0.00 M | 0.382 | - |") {
		t.Errorf("e1000e-tso/e1000e-sg as cited:\n%s", b.String())
	}
}
