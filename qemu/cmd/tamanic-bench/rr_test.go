package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
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

// TestStatsNIC: a /stats document names its interface by the members
// only that interface's driver reports, and by nothing else: ENET1's
// carries the 82574L's member nested under "e1000e", which does not make
// it the 82574L's.
func TestStatsNIC(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want string
	}{
		{`{"nic":{"mib":{"RMON_T_PACKETS":1},"irqs":3,"e1000e":{"hw":{},"irqs":9}}}`, "enet"},
		{`{"nic":{"driver":{},"hw":{"GoodRx":1},"irqs":9}}`, "e1000e"},
		{`{"nic":{"mib":{},"hw":{}}}`, ""},
		{`{"nic":{"mib":null}}`, ""},
		{`{"nic":"x"}`, ""},
		{`{}`, ""},
	} {
		var s map[string]any
		if err := json.Unmarshal([]byte(c.doc), &s); err != nil {
			t.Fatal(err)
		}
		if got := statsNIC(s); got != c.want {
			t.Errorf("%s: %q, want %q", c.doc, got, c.want)
		}
	}
}

// TestRRCheckStats: a row is refused another interface's /stats or a
// mode other than its own; the baseline's rows, whose /stats has neither,
// pass, and a tamanic build whose mode rrBoot does not set is checked
// for its interface only.
func TestRRCheckStats(t *testing.T) {
	enet := map[string]any{"tx_mode": "tso", "copybreak": 512.0, "nic": map[string]any{"mib": map[string]any{}}}
	e1k := map[string]any{"tx_mode": "tso", "copybreak": 0.0, "nic": map[string]any{"hw": map[string]any{}}}
	row := RRRun{Firmware: "tamanic", Board: "mcimx7d", NIC: "e1000e", Mode: "tso", Copybreak: 0}
	if err := rrCheckStats(e1k, row); err != nil {
		t.Errorf("the 82574L's own /stats: %v", err)
	}
	if err := rrCheckStats(enet, row); err == nil {
		t.Error("an 82574L row took ENET1's /stats")
	}
	row.Mode = "sg"
	if err := rrCheckStats(e1k, row); err == nil {
		t.Error("an sg row took a tso interface")
	}
	row = RRRun{Firmware: "tamanic", Board: "mcimx7d", NIC: "enet", Mode: "tso", Copybreak: 256}
	if err := rrCheckStats(enet, row); err == nil {
		t.Error("a copybreak-256 row took an interface at 512")
	}
	row.Copybreak = 512
	if err := rrCheckStats(enet, row); err != nil {
		t.Errorf("ENET1's own /stats: %v", err)
	}
	if err := rrCheckStats(map[string]any{}, RRRun{Firmware: "baseline", NIC: "enet"}); err != nil {
		t.Errorf("baseline: %v", err)
	}
	nm := RRRun{Firmware: rrFirmwareNoMerge, NIC: "enet", Mode: "tso", Copybreak: 1}
	if err := rrCheckStats(enet, nm); err != nil {
		t.Errorf("no-merge build on its ENET: %v", err)
	}
	if err := rrCheckStats(e1k, nm); err == nil {
		t.Error("no-merge ENET row took the 82574L's /stats")
	}
}

// TestRRInterfaces: the i.MX7D's boots carry the 82574L on its own user
// network and run rows on both interfaces; the mx6ullevk's only its ENET,
// with no e1000e. Under icount the clock sleeps (sleep=on).
func TestRRInterfaces(t *testing.T) {
	ifs := rrInterfaces("mcimx7d")
	if strings.Join(ifs, ",") != "enet,e1000e" {
		t.Fatalf("mcimx7d: %v", ifs)
	}
	o := rrOptions("fw.elf", "mcimx7d", "icount", ifs)
	if !o.E1000E || o.Board != "mcimx7d" || o.ELF != "fw.elf" || strings.Join(o.Args, " ") != "-icount shift=0,sleep=on" {
		t.Errorf("mcimx7d icount options: %+v", o)
	}
	ifs = rrInterfaces("mx6ullevk")
	if strings.Join(ifs, ",") != "enet" {
		t.Fatalf("mx6ullevk: %v", ifs)
	}
	if o := rrOptions("fw.elf", "mx6ullevk", "plain", ifs); o.E1000E || len(o.Args) != 0 || o.Icount {
		t.Errorf("mx6ullevk plain options: %+v", o)
	}
}

// TestNICLabel: the label names the board and the NIC the firmware
// serves on; rows without either keep no label.
func TestNICLabel(t *testing.T) {
	for _, c := range [][3]string{
		{"mx6ullevk", "enet", "i.MX6ULL ENET1"},
		{"mcimx7d", "enet", "i.MX7D ENET1"},
		{"mcimx7d", "e1000e", "i.MX7D 82574L"},
		{"sabrelite", "enet", "sabrelite enet"},
		{"", "", ""},
	} {
		if got := qemu.NICLabel(c[0], c[1]); got != c[2] {
			t.Errorf("qemu.NICLabel(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// TestRRReportInterfaces: rows of one firmware on two interfaces are kept
// apart, each labelled with its board and NIC, its figures the medians of
// its own runs; the receive wake-up line is given per interface, with
// the interrupts named by the NIC that counted them.
func TestRRReportInterfaces(t *testing.T) {
	var rs []RRRun
	for i := range 3 {
		for _, x := range []struct {
			nic  string
			tps  float64
			irqs float64
			busy float64
		}{{"enet", 1000, 1, 50e3}, {"e1000e", 2000, 2, 70e3}} {
			base := RRRun{Firmware: "tamanic", Board: "mcimx7d", NIC: x.nic, Proto: "udp", Size: 64, N: 10, Rep: i}
			p, ic := base, base
			p.Boot, p.TPS = "plain", x.tps+float64(i)
			ic.Boot, ic.BusyPerTxn, ic.IRQs, ic.RxPasses = "icount", x.busy, x.irqs, x.irqs
			rs = append(rs, p, ic)
		}
	}
	var b strings.Builder
	rrReport(&b, rs, "cmd")
	out := b.String()
	for _, want := range []string{
		"| tamanic, i.MX7D ENET1 | UDP_RR | 64 | 1001 | n/a | n/a | 50 k |",
		"| tamanic, i.MX7D 82574L | UDP_RR | 64 | 2001 | n/a | n/a | 70 k |",
		"Receive wake-up (tamanic, i.MX7D ENET1, UDP_RR 64 B, icount): 1.00 receive passes and 1.00 ENET interrupts",
		"Receive wake-up (tamanic, i.MX7D 82574L, UDP_RR 64 B, icount): 2.00 receive passes and 2.00 82574L interrupts",
		"the 82574L (QEMU's e1000e",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "| tamanic") != 2 {
		t.Errorf("want two rows:\n%s", out)
	}
}
