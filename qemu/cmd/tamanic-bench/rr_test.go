package main

import (
	"strings"
	"testing"
)

// TestHistPercentiles: percentiles come from the samples added between
// two readings only, each the middle of its 1 µs bucket.
func TestHistPercentiles(t *testing.T) {
	h0 := map[int]float64{100: 50}                        // before the run
	h1 := map[int]float64{100: 50, 110: 98, 300: 1, 5: 1} // 100 new samples
	p50, p99 := histPercentiles(h0, h1)
	if p50 != 110500 || p99 != 110500 {
		t.Fatalf("p50 %d p99 %d, want 110500 and 110500", p50, p99)
	}
	h1[300] = 5 // 104 new: the top 5 past the 99th percentile's rank
	if _, p99 = histPercentiles(h0, h1); p99 != 300500 {
		t.Fatalf("p99 %d, want 300500", p99)
	}
	if p50, p99 = histPercentiles(h1, h1); p50 != 0 || p99 != 0 {
		t.Fatalf("no new samples: %d %d", p50, p99)
	}
}

// TestRRReport: the main table takes each figure's median over the runs
// and sums the losses; the sweep table averages its two passes.
func TestRRReport(t *testing.T) {
	var rs []RRRun
	for i, tps := range []float64{100, 900, 1000} {
		rs = append(rs, RRRun{Firmware: "tamanic", Boot: "plain", Proto: "tcp", Size: 1, Copybreak: 512, TPS: tps, Rep: i, Lost: 1})
		rs = append(rs, RRRun{Firmware: "tamanic", Boot: "icount", Proto: "tcp", Size: 1, Copybreak: 512, BusyPerTxn: 1000 * tps, Rep: i})
	}
	rs = append(rs, RRRun{Firmware: "tamanic", Boot: "icount", Proto: "udp", Size: 64, Copybreak: 0, Sweep: true, BusyPerTxn: 100e3},
		RRRun{Firmware: "tamanic", Boot: "icount", Proto: "udp", Size: 64, Copybreak: 0, Sweep: true, BusyPerTxn: 120e3, Rep: 1})
	var b strings.Builder
	rrReport(&b, rs, "cmd")
	out := b.String()
	if !strings.Contains(out, "| tamanic | TCP_RR | 1 | 900 |") || !strings.Contains(out, "| 900 k |") || !strings.Contains(out, "| 3 | 0 |") {
		t.Errorf("main table:\n%s", out)
	}
	if !strings.Contains(out, "| 0 | 110.0 k") {
		t.Errorf("sweep table:\n%s", out)
	}
}
