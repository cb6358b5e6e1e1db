package main

import (
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

// TestCacheModelReport checks the estimate rows: the median run of each
// mode, its cycles from the cited constants, the CPU load at line rate,
// and a sensitivity table whose bounce/sg ratio follows the counts.
func TestCacheModelReport(t *testing.T) {
	k := qemu.SoCCosts["imx6ull"]
	mk := func(mode string, insns, l1 float64) qemu.CostRun {
		c := qemu.CacheCounts{"insns": insns, "l1_read_miss": l1}
		return qemu.CostRun{Dir: "tx", Mode: mode, SoC: "imx6ull", Cache: c, Cycles: k.Cycles(c)}
	}
	runs := []qemu.CostRun{mk("bounce", 20e6, 30000), mk("bounce", 21e6, 30000), mk("bounce", 22e6, 30000), mk("sg", 19e6, 10000)}
	var b strings.Builder
	if err := cacheReport(&b, runs, "cmd"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Median bounce: 21 M instructions + 30000 L1 misses x 19 cycles.
	cyc := 21e6*k.CPI + 30000*k.L2Hit
	load := cyc * (100e6 / 8 / (1 << 20)) / (900e6)
	for _, want := range []string{"| guest→host | bounce | 21.00 M | 21.57 M (3 runs: 20.57–22.57) | 1.12 | 30000 |", "| guest→host | sg | 19.00 M | 19.19 M | 1.00 | 10000 |", "`cmd`", "28.6% at 100 Mbit/s, 900 MHz"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if got := 100 * k.Load(cyc); got < 27 || got > 29 || load*100 != got {
		t.Errorf("load %.2f%%, want %.2f%%", got, 100*load)
	}
	// The ratio row as cited: (21 M + 0.57 M) / (19 M + 0.19 M).
	if !strings.Contains(out, "| (as cited) | 1 | 21.57 M | 19.19 M | 1.124 | - |") {
		t.Errorf("sensitivity row as cited missing:\n%s", out)
	}
	// Doubling L2Hit raises bounce more than sg.
	if !strings.Contains(out, "| L2Hit | 2 | 22.14 M | 19.38 M | 1.142 | - |") {
		t.Errorf("sensitivity row L2Hit x2 missing:\n%s", out)
	}
	// The 82574L's rows against e1000e-sg; the invalidate-address
	// check's count shown.
	k7 := qemu.SoCCosts["imx7d"]
	mk7 := func(mode string, insns, inv float64) qemu.CostRun {
		c := qemu.CacheCounts{"insns": insns, "inv_dirty": inv}
		return qemu.CostRun{Dir: "tx", Mode: mode, SoC: "imx7d", Cache: c, Cycles: k7.Cycles(c)}
	}
	b.Reset()
	if err := cacheReport(&b, []qemu.CostRun{mk7("e1000e-sg", 20e6, 0), mk7("e1000e-tso", 5e6, 2.5), mk7("tamago", 40e6, 0)}, "cmd"); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{"| e1000e-tso | 5.00 M | 5.00 M | 0.25 | 0 | 0 | 0 / 0 | 0 | 0 | 0 | 2.5 |", "| tamago | 40.00 M | 40.00 M | – |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// A 0 covers only what the model placed: unplaced maintenance is
	// named beside it.
	un := mk7("e1000e-sg", 20e6, 0)
	un.Cache["mva_unknown"] = 3
	b.Reset()
	if err := cacheReport(&b, []qemu.CostRun{un}, "cmd"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 0.0 (3.0 operations or accesses not placed: unchecked) |") {
		t.Errorf("a row with unplaced maintenance reports its check as complete:\n%s", b.String())
	}
	if err := cacheReport(&b, []qemu.CostRun{{Dir: "tx", Mode: "sg"}}, "cmd"); err == nil {
		t.Error("runs without cache counts made a report")
	}
}

// TestCacheModelPlot draws the cache panel: bars per SoC and mode with
// the CPU load at each SoC's line rate, and a direction without runs.
func TestCacheModelPlot(t *testing.T) {
	k := qemu.SoCCosts["imx6ull"]
	var runs []qemu.CostRun
	for i, mode := range []string{"bounce", "sg", "sg", "tamago"} {
		c := qemu.CacheCounts{"insns": float64(20+i) * 1e6}
		runs = append(runs, qemu.CostRun{Dir: "tx", Mode: mode, SoC: "imx6ull", Cache: c, Cycles: k.Cycles(c)})
	}
	bs := cacheBars(runs, "tx")
	if len(bs) != 3 || bs[1].Cost.N != 2 || bs[1].Cost.Min != 21e6 || bs[1].Cost.Max != 22e6 || !bs[2].Baseline {
		t.Fatalf("bars %+v", bs)
	}
	if got, want := bs[0].Mbps.Med, 100*k.Load(20e6); got != want {
		t.Errorf("bounce load %.2f%%, want %.2f%%", got, want)
	}
	if err := drawCachePlot(runs, t.TempDir()+"/cache.png"); err != nil {
		t.Fatal(err)
	}
}
