package main

import (
	"image/color"
	"strings"
	"testing"
)

// cxRuns are synthetic runs of an i.MX7D bench with the co-simulation:
// the ENET's tso and the ConnectX with LSO and without, both directions.
func cxRuns() []Run {
	var all []Run
	all = append(all, synth("tx", "tso", 512, []float64{100}, []float64{6.6e6, 6.7e6, 6.8e6}, 1e6, 1e6, 2.16e6)...)
	all = append(all, synth("rx", "tso", 512, []float64{80}, []float64{11e6, 11.2e6, 11.1e6}, 2e6, 5e6, 0.5e6)...)
	all = append(all, synth("rx", "tso", -1, []float64{80}, []float64{99e6}, 2e6, 5e6, 0.5e6)...)
	all = append(all, synth("tx", "cx-sg", 0, []float64{50}, []float64{28e6, 29e6, 28.5e6}, 0, 1e6, 4.4e6)...)
	all = append(all, synth("tx", "cx-tso", 0, []float64{150}, []float64{2.2e6, 2.3e6, 2.1e6}, 0, 0.5e6, 0.4e6)...)
	all = append(all, synth("rx", "cx-tso", 0, []float64{90}, []float64{22e6, 22e6, 22e6}, 0, 8e6, 0.2e6)...)
	return all
}

// TestOffloadReport: the report states the offload's saving as ratios
// of the icount medians, both directions, whole guest and TX stage.
func TestOffloadReport(t *testing.T) {
	var w strings.Builder
	offloadReport(&w, cxRuns())
	out := w.String()
	for _, want := range []string{
		"### ConnectX offload",
		// busy medians 2.2, 28.5, 6.7 M: 28.5/2.2 = 12.95, 6.7/2.2 = 3.05
		"- guest→host, whole guest (busy): cx-tso 2.20 M, cx-sg 28.50 M, ENET tso 6.70 M: hardware LSO costs the guest 13.0× less than no LSO (cx-sg/cx-tso) and 3.0× less than the ENET's software TSO (tso/cx-tso)",
		// TX stage 0.4, 4.4, 2.16 M: 11.0× and 5.4×
		"- guest→host, endpoint TX stage (placement, segmentation, driver, doorbell): cx-tso 0.40 M, cx-sg 4.40 M, ENET tso 2.16 M: hardware LSO costs the guest 11.0× less than no LSO (cx-sg/cx-tso) and 5.4× less than the ENET's software TSO (tso/cx-tso)",
		// receive: copybreak 512's median 11.1 M, not copybreak off's
		"- host→guest, whole guest (busy): cx-tso 22.00 M, ENET tso (copybreak 512) 11.10 M: ENET/ConnectX 0.5×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks\n%s\nin\n%s", want, out)
		}
	}

	// A missing configuration is n/a, not a division by zero.
	var part []Run
	for _, r := range cxRuns() {
		if r.Mode != "cx-sg" {
			part = append(part, r)
		}
	}
	w.Reset()
	offloadReport(&w, part)
	if !strings.Contains(w.String(), "cx-sg n/a, ENET tso 6.70 M: hardware LSO costs the guest n/a less than no LSO") {
		t.Errorf("without cx-sg runs:\n%s", w.String())
	}

	// Other boards: no ConnectX, no section.
	w.Reset()
	offloadReport(&w, synthAll())
	if w.Len() != 0 {
		t.Errorf("report without ConnectX runs:\n%s", w.String())
	}
}

// TestPlotConnectX: the plot draws the ConnectX modes as bars of their
// own, each in its own colour, named for the NIC.
func TestPlotConnectX(t *testing.T) {
	var got []string
	for _, b := range dirBars(cxRuns(), "tx") {
		got = append(got, b.Label)
	}
	if want := "tso|ConnectX no LSO (cx-sg)|ConnectX LSO (cx-tso)"; strings.Join(got, "|") != want {
		t.Errorf("tx bars %q, want %q", strings.Join(got, "|"), want)
	}
	got = got[:0]
	for _, b := range dirBars(cxRuns(), "rx") {
		got = append(got, b.Label)
	}
	if want := "tso, copybreak 512|tso, copybreak off|ConnectX LSO (cx-tso)"; strings.Join(got, "|") != want {
		t.Errorf("rx bars %q, want %q", strings.Join(got, "|"), want)
	}
	seen := map[color.RGBA]string{}
	for _, m := range append([]string{BaselineMode}, plotModes...) {
		r, g, b, a := modeColor(m).RGBA()
		c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
		if o, dup := seen[c]; dup {
			t.Errorf("modes %s and %s share the colour %v", o, m, c)
		}
		seen[c] = m
	}
	if err := drawPlot(cxRuns(), t.TempDir()+"/cx.png"); err != nil {
		t.Fatal(err)
	}
}
