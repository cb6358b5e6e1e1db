package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// synth makes the runs of one configuration: one plain run per Mbps value
// and one icount run per busy value, with fixed stage timers.
func synth(dir, mode string, cb int, mbps, busy []float64, irq, rx, tx float64) []Run {
	var rs []Run
	for i, m := range mbps {
		rs = append(rs, Run{Boot: "plain", Dir: dir, Mode: mode, Copybreak: cb, N: i, Bytes: 1 << 20, Mbps: m})
	}
	for i, b := range busy {
		rs = append(rs, Run{Boot: "icount", Dir: dir, Mode: mode, Copybreak: cb, N: i, Bytes: 1 << 20, BusyPerMiB: b,
			IRQPerMiB: irq, RxPerMiB: rx, TxPerMiB: tx})
	}
	return rs
}

func synthAll() []Run {
	var all []Run
	all = append(all, synth("tx", BaselineMode, 0, []float64{50, 60, 55}, []float64{30e6, 20e6, 25e6}, 1e6, 2e6, 3e6)...)
	all = append(all, synth("tx", "bounce", 512, []float64{100, 80, 90}, []float64{23e6, 21e6, 26e6}, 1e6, 2e6, 10e6)...)
	all = append(all, synth("tx", "tso", 512, []float64{200}, []float64{6e6}, 0.5e6, 1e6, 2e6)...)
	all = append(all, synth("rx", "tso", 512, []float64{70, 75}, []float64{11e6, 12e6}, 2e6, 5e6, 1e6)...)
	all = append(all, synth("rx", "tso", -1, []float64{65}, []float64{13e6}, 2e6, 5e6, 1e6)...)
	// Timers over the busy figure (they overlap in a broken firmware):
	// the rest is clamped at 0, not drawn below the axis.
	all = append(all, synth("rx", BaselineMode, 0, []float64{40}, []float64{4e6}, 2e6, 2e6, 1e6)...)
	return all
}

func TestSpread(t *testing.T) {
	rs := synth("tx", "sg", 512, nil, []float64{5, 1, 9, 3}, 0, 0, 0)
	s := spread(rs, func(r Run) float64 { return r.BusyPerMiB })
	// median takes the upper middle of an even count, like the tables.
	if s != (stat{Med: 5, Min: 1, Max: 9, N: 4}) {
		t.Fatalf("spread = %+v, want median 5, min 1, max 9 over 4 runs", s)
	}
	if s := spread(nil, func(r Run) float64 { return r.Mbps }); s != (stat{}) {
		t.Fatalf("spread of no runs = %+v, want zero", s)
	}
}

func TestDirBars(t *testing.T) {
	all := synthAll()
	tx := dirBars(all, "tx")
	var got []string
	for _, b := range tx {
		got = append(got, b.Label)
	}
	// The baseline is drawn last, whatever order the runs came in.
	if want := "bounce|tso|TamaGo enet (baseline)"; strings.Join(got, "|") != want {
		t.Fatalf("tx bars %q, want %q", strings.Join(got, "|"), want)
	}
	if !tx[2].Baseline || tx[0].Baseline {
		t.Fatalf("baseline flags wrong: %+v", tx)
	}
	b := tx[0]
	if b.Cost != (stat{Med: 23e6, Min: 21e6, Max: 26e6, N: 3}) || b.Mbps != (stat{Med: 90, Min: 80, Max: 100, N: 3}) {
		t.Fatalf("bounce cost %+v, throughput %+v", b.Cost, b.Mbps)
	}
	// Stages add up to the busy median: 1 + 2 + 10 timed, 10 rest.
	if b.Stages != [4]float64{1e6, 2e6, 10e6, 10e6} {
		t.Fatalf("bounce stages %v", b.Stages)
	}
	rx := dirBars(all, "rx")
	got = got[:0]
	for _, b := range rx {
		got = append(got, b.Label)
	}
	if want := "tso, copybreak 512|tso, copybreak off|TamaGo enet (baseline)"; strings.Join(got, "|") != want {
		t.Fatalf("rx bars %q, want %q", strings.Join(got, "|"), want)
	}
	if rx[2].Stages[3] != 0 {
		t.Fatalf("rest %v: timers above the busy figure must not give a negative rest", rx[2].Stages[3])
	}
}

func TestDrawPlot(t *testing.T) {
	dir := t.TempDir()
	for name, all := range map[string][]Run{
		"full": synthAll(),
		// No baseline (other boards), a direction without runs, and a
		// configuration with only plain runs must still draw.
		"partial": synth("tx", "sg", 512, []float64{10, 12}, nil, 0, 0, 0),
	} {
		path := filepath.Join(dir, name+".png")
		if err := drawPlot(all, path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if r := img.Bounds(); r.Dx() < 1000 || r.Dy() < 1000 {
			t.Fatalf("%s: image %v too small to read", name, r)
		}
	}
}

func TestProgress(t *testing.T) {
	var w bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(&w, "mx6ullevk", 3, func() time.Time { return now })
	planTransfers(p, "mx6ullevk", 3, 1<<20, 0, false, true)
	// 9 configurations on each of 2 boots, 3 runs; the baseline's 2
	// directions on 2 boots, 3 runs.
	if want := 2*9*3 + 2*2*3; p.total != want || p.totalBytes != int64(want)<<20 {
		t.Fatalf("planned %d transfers, %d bytes; want %d", p.total, p.totalBytes, want)
	}
	p.begin("icount", "rx", "tso", -1, 1, 1<<20)
	now = now.Add(10 * time.Second)
	p.end(Run{Boot: "icount", Bytes: 1 << 20, BusyPerMiB: 11e6}, nil)
	out := w.String()
	for _, want := range []string{
		"[1/66] mx6ullevk icount tso host→guest copybreak off run 2/3 (1 MiB)",
		"11.00 M instructions/MiB",
		"10s elapsed, about 10m50s left", // 10 s per transfer, 65 to go
	} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q:\n%s", want, out)
		}
	}
	w.Reset()
	p.begin("icount+gdb", "tx", "sg", 512, 0, 4<<20)
	p.end(Run{Boot: "plain", Bytes: 4 << 20, Mbps: 123.4}, nil)
	if out := w.String(); !strings.Contains(out, "profile sg guest→host run 1/1 (4 MiB)") || !strings.Contains(out, "123.4 Mbit/s") {
		t.Errorf("progress output:\n%s", out)
	}
	w.Reset()
	now = now.Add(5 * time.Second)
	p.note("booting plain")
	if out := w.String(); out != "mx6ullevk: booting plain (15s elapsed)\n" {
		t.Errorf("note: %q", out)
	}
	var nilp *progress // a nil progress (no reporting) is silent and safe
	nilp.plan(1, 1)
	nilp.begin("plain", "tx", "sg", 0, 0, 1)
	nilp.end(Run{}, nil)
	nilp.note("x")
}

func TestLeft(t *testing.T) {
	for _, c := range []struct {
		el          time.Duration
		done, total int64
		want        string
	}{
		{time.Minute, 0, 10, "time left unknown"},
		{time.Minute, 1, 4, "about 3m0s left"},
		{time.Minute, 4, 4, "planned transfers done"},
		{time.Minute, 5, 4, "planned transfers done"}, // more than planned (a new row)
	} {
		if got := left(c.el, c.done, c.total); got != c.want {
			t.Errorf("left(%v, %d, %d) = %q, want %q", c.el, c.done, c.total, got, c.want)
		}
	}
}
