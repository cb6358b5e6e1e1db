package main

import (
	"strings"

	"gonum.org/v1/plot"

	"github.com/tamanic/tamanic/qemu"
)

// cacheBars gathers the cache model's runs of direction dir as bars, one
// per SoC and mode in the order the runs first name them: Cost holds the
// estimated cycles per MiB over the runs (median, lowest, highest) and
// Mbps, here, the CPU load at the SoC's line rate in percent.
func cacheBars(runs []qemu.CostRun, dir string) []bar {
	type ck struct{ soc, mode string }
	g := map[ck][]qemu.CostRun{}
	var order []ck
	for _, r := range runs {
		if r.Cache == nil || r.SoC == "" || r.Dir != dir {
			continue
		}
		k := ck{r.SoC, r.Mode}
		if g[k] == nil {
			order = append(order, k)
		}
		g[k] = append(g[k], r)
	}
	var out []bar
	for _, k := range order {
		kk := qemu.SoCCosts[k.soc]
		var cyc, load []float64
		for _, r := range g[k] {
			cyc = append(cyc, r.Cycles)
			load = append(load, 100*kk.Load(r.Cycles))
		}
		name, _, _ := strings.Cut(qemu.CacheSoCs[k.soc].Name, " (")
		label := name + " " + k.mode
		if k.mode == BaselineMode {
			label = name + " TamaGo enet"
		}
		out = append(out, bar{Label: label, Key: key{dir: dir, mode: k.mode}, Baseline: k.mode == BaselineMode,
			Cost: statOf(cyc), Mbps: statOf(load)})
	}
	return out
}

func statOf(v []float64) stat {
	s := stat{Min: v[0], Max: v[0], N: len(v)}
	for _, x := range v {
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Med = median(v)
	return s
}

// drawCachePlot writes a PNG of the cache model's estimates, one column
// per direction: estimated core cycles per MiB by SoC and mode, and the
// CPU load that makes at each SoC's line rate and clock (qemu.SoCCosts).
func drawCachePlot(runs []qemu.CostRun, path string) error {
	var rows [2][]*plot.Plot
	for _, d := range []string{"tx", "rx"} {
		bs := cacheBars(runs, d)
		name := dirName(d)
		p, err := barsPanel(name+": estimated core cycles per MiB (cache model; lower is better)", "million cycles / MiB", bs,
			func(b bar) stat { return b.Cost }, 1e6)
		if err != nil {
			return err
		}
		rows[0] = append(rows[0], p)
		if p, err = barsPanel(name+": estimated CPU load at line rate (i.MX6ULL 100, i.MX6Q 400, i.MX7D 1000 Mbit/s)", "% of one core", bs,
			func(b bar) stat { return b.Mbps }, 1); err != nil {
			return err
		}
		rows[1] = append(rows[1], p)
	}
	return writeGrid(path, "cache plot", 850, rows[:])
}
