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
	if err := cacheReport(&b, []qemu.CostRun{{Dir: "tx", Mode: "sg"}}, "cmd"); err == nil {
		t.Error("runs without cache counts made a report")
	}
}
