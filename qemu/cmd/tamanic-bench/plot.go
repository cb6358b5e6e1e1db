package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tamanic/tamanic/internal/plotgrid"
)

// stat is a figure over a configuration's runs: the median and the range
// (min to max) the runs spread over.
type stat struct {
	Med, Min, Max float64
	N             int
}

// spread is f's median, minimum and maximum over rs.
func spread(rs []Run, f func(Run) float64) stat {
	if len(rs) == 0 {
		return stat{}
	}
	s := stat{Min: f(rs[0]), Max: f(rs[0]), N: len(rs)}
	var v []float64
	for _, r := range rs {
		x := f(r)
		v = append(v, x)
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Med = median(v)
	return s
}

// stageNames are the stages of a bar's stack, bottom first, as the
// report's stage table splits the icount busy figure.
var stageNames = [4]string{"NIC interrupt handler", "endpoint RX (gVisor IP/TCP input)", "endpoint TX (placement, TSO, driver)", "rest (gVisor TCP, application, scheduler)"}

// bar is one configuration of one direction as the plot draws it.
type bar struct {
	Label    string
	Key      key
	Baseline bool // TamaGo's own driver (BaselineMode)
	// Cost is guest instructions per MiB under icount; Mbps the plain
	// boot's throughput.
	Cost, Mbps stat
	// Stages are the medians of the stage timers (instructions per MiB,
	// icount) in stageNames' order; the rest is the busy median less the
	// timed stages, at least 0.
	Stages [4]float64
}

// dirBars gathers the bars of direction dir ("tx" or "rx") in the order
// the runs first name them, the baseline last.
func dirBars(all []Run, dir string) []bar {
	keys, g := groups(all)
	var out []bar
	var base []bar
	for _, k := range keys {
		if k.dir != dir {
			continue
		}
		ic := g[k]["icount"]
		b := bar{Key: k, Baseline: k.mode == BaselineMode,
			Cost: spread(ic, func(r Run) float64 { return r.BusyPerMiB }),
			Mbps: spread(g[k]["plain"], func(r Run) float64 { return r.Mbps })}
		b.Stages[0] = col(ic, func(r Run) float64 { return r.IRQPerMiB })
		b.Stages[1] = col(ic, func(r Run) float64 { return r.RxPerMiB })
		b.Stages[2] = col(ic, func(r Run) float64 { return r.TxPerMiB })
		b.Stages[3] = max(0, b.Cost.Med-b.Stages[0]-b.Stages[1]-b.Stages[2])
		switch {
		case b.Baseline:
			b.Label = "TamaGo enet (baseline)"
		case modeLabels[k.mode] != "":
			b.Label = modeLabels[k.mode]
		case dir == "rx":
			b.Label = fmt.Sprintf("%s, copybreak %s", k.mode, cbName(k.cb))
		default:
			b.Label = k.mode
		}
		if b.Baseline {
			base = append(base, b)
		} else {
			out = append(out, b)
		}
	}
	return append(out, base...)
}

// baselineColor draws the baseline's bars and reference lines.
var baselineColor = color.RGBA{R: 120, G: 120, B: 120, A: 255}

// barsPanel draws one figure (cost or throughput) of bs as bars, one per
// configuration, with the runs' min–max as error bars and the baseline's
// median as a dashed reference line across the panel.
func barsPanel(title, ylabel string, bs []bar, fig func(bar) stat, scale float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	var labels []string
	var pts plotter.XYs
	var errs plotter.YErrors
	top := 0.0
	for i, b := range bs {
		s := fig(b)
		labels = append(labels, b.Label)
		ch, err := plotter.NewBarChart(plotter.Values{s.Med / scale}, vg.Points(22))
		if err != nil {
			return nil, err
		}
		ch.XMin = float64(i)
		ch.Color = modeColor(b.Key.mode)
		ch.LineStyle.Width = vg.Points(0.5)
		if b.Baseline {
			ch.Color = baselineColor
			line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: s.Med / scale}, {X: float64(len(bs)) - 0.5, Y: s.Med / scale}})
			if err != nil {
				return nil, err
			}
			line.Color = baselineColor
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(line)
			p.Legend.Add("TamaGo baseline (median)", line)
		}
		p.Add(ch)
		top = max(top, s.Max/scale, s.Med/scale)
		if s.N > 0 {
			pts = append(pts, plotter.XY{X: float64(i), Y: s.Med / scale})
			errs = append(errs, struct{ Low, High float64 }{(s.Med - s.Min) / scale, (s.Max - s.Med) / scale})
		}
	}
	if len(pts) > 0 {
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return nil, err
		}
		eb.Width = vg.Points(1)
		eb.CapWidth = vg.Points(8)
		p.Add(eb)
		p.Y.Label.Text += "\n(bar: median; whisker: min–max of the runs)"
	}
	headroom(p, top, 1)
	nominal(p, labels)
	return p, nil
}

// stagesPanel draws bs's icount busy figure as stacked bars, one segment
// per stage the firmware times.
func stagesPanel(title string, bs []bar) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "million instructions / MiB (median)"
	p.Y.Min = 0
	var labels []string
	for _, b := range bs {
		labels = append(labels, b.Label)
	}
	var below *plotter.BarChart
	for s, name := range stageNames {
		if len(bs) == 0 {
			break
		}
		var v plotter.Values
		for _, b := range bs {
			v = append(v, b.Stages[s]/1e6)
		}
		ch, err := plotter.NewBarChart(v, vg.Points(22))
		if err != nil {
			return nil, err
		}
		ch.Color = stageColors[s]
		ch.LineStyle.Width = vg.Points(0.5)
		if below != nil {
			ch.StackOn(below)
		}
		below = ch
		p.Add(ch)
		p.Legend.Add(name, ch)
	}
	top := 0.0
	for _, b := range bs {
		top = max(top, (b.Stages[0]+b.Stages[1]+b.Stages[2]+b.Stages[3])/1e6)
	}
	headroom(p, top, len(stageNames))
	nominal(p, labels)
	return p, nil
}

// drawPlot writes a PNG of all's runs, one column per direction: guest
// instructions per MiB under icount with the runs' spread and the
// baseline, the same split by stage, and wall-clock throughput.
func drawPlot(all []Run, path string) error {
	dirs := []string{"tx", "rx"}
	var rows [3][]*plot.Plot
	for _, d := range dirs {
		bs := dirBars(all, d)
		name := dirName(d)
		p, err := barsPanel(name+": guest CPU per MiB (QEMU -icount; lower is better)", "million instructions / MiB", bs,
			func(b bar) stat { return b.Cost }, 1e6)
		if err != nil {
			return err
		}
		rows[0] = append(rows[0], p)
		if p, err = stagesPanel(name+": guest CPU per MiB by stage (-icount, timed by the firmware)", bs); err != nil {
			return err
		}
		rows[1] = append(rows[1], p)
		if p, err = barsPanel(name+": throughput (QEMU, wall clock; higher is better)", "Mbit/s", bs,
			func(b bar) stat { return b.Mbps }, 1); err != nil {
			return err
		}
		rows[2] = append(rows[2], p)
	}
	return writeGrid(path, "plot", 1200, rows[:])
}

// writeGrid draws rows of panels (two a row) onto a PNG
// plotgrid.Width points wide and height points high at path; what names
// the plot in an error.
func writeGrid(path, what string, height float64, rows [][]*plot.Plot) error {
	return plotgrid.Write(path, what, height, rows)
}

// headroom puts p's legend (of lines entries) top left and raises the Y
// axis above the tallest bar, top, so the legend clears the bars.
func headroom(p *plot.Plot, top float64, lines int) {
	p.Legend.Top = true
	p.Legend.Left = true
	if top > 0 {
		p.Y.Max = top * (1.1 + 0.08*float64(lines))
	}
}

// modeLabels name the bars of the other NICs' modes (they have no
// copybreak setting).
var modeLabels = map[string]string{
	"e1000e-sg":  "82574L no TSO (e1000e-sg)",
	"e1000e-tso": "82574L TSO (e1000e-tso)",
	"cx-sg":      "ConnectX no LSO (cx-sg)",
	"cx-tso":     "ConnectX LSO (cx-tso)",
}

// plotModes are the modes the plot knows, each drawn in its own colour.
var plotModes = []string{"bounce", "sg", "tso", "e1000e-sg", "e1000e-tso", "cx-sg", "cx-tso"}

// otherColor draws a mode the plot does not know.
var otherColor = color.RGBA{A: 255}

// modeColor gives each mode one colour in every panel.
func modeColor(mode string) color.Color {
	if mode == BaselineMode {
		return baselineColor
	}
	for i, m := range plotModes {
		if m == mode {
			return plotutil.Color(i)
		}
	}
	return otherColor
}

// stageColors fill the stage panel's stacks, bottom first.
var stageColors = [4]color.Color{
	color.RGBA{R: 214, G: 96, B: 77, A: 255},   // interrupt handler
	color.RGBA{R: 68, G: 119, B: 170, A: 255},  // endpoint RX
	color.RGBA{R: 238, G: 187, B: 68, A: 255},  // endpoint TX
	color.RGBA{R: 187, G: 187, B: 187, A: 255}, // rest
}

// nominal names the bars on p's X axis; a panel without bars (a direction
// with no runs) says so instead.
func nominal(p *plot.Plot, labels []string) {
	if len(labels) == 0 {
		p.Title.Text += " — no runs"
		p.HideX()
		return
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = draw.XRight
}
