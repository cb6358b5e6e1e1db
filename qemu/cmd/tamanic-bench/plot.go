package main

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawPlot draws guest CPU cost (icount) and throughput (plain) per
// configuration, side by side, into a PNG.
func drawPlot(all []Run, path string) error {
	keys, g := groups(all)
	var labels []string
	cost, mbps := plotter.Values{}, plotter.Values{}
	for _, k := range keys {
		l := fmt.Sprintf("%s %s", map[string]string{"tx": "g→h", "rx": "h→g"}[k.dir], k.mode)
		if k.dir == "rx" {
			if k.cb < 0 {
				l += " cb off"
			} else {
				l += fmt.Sprintf(" cb %d", k.cb)
			}
		}
		labels = append(labels, l)
		cost = append(cost, col(g[k]["icount"], func(r Run) float64 { return r.BusyPerMiB })/1e6)
		mbps = append(mbps, col(g[k]["plain"], func(r Run) float64 { return r.Mbps }))
	}
	mk := func(title, ylabel string, v plotter.Values, c int) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		b, err := plotter.NewBarChart(v, vg.Points(18))
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(c)
		p.Add(b)
		p.NominalX(labels...)
		p.X.Tick.Label.Rotation = 0.6
		p.X.Tick.Label.XAlign = draw.XRight
		return p, nil
	}
	p1, err := mk("Guest CPU per MiB (QEMU -icount, lower is better)", "million instructions / MiB", cost, 0)
	if err != nil {
		return err
	}
	p2, err := mk("Throughput (QEMU, wall clock)", "Mbit/s", mbps, 1)
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(900), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5)}
	plots := [][]*plot.Plot{{p1, p2}}
	canvases := plot.Align(plots, tiles, dc)
	p1.Draw(canvases[0][0])
	p2.Draw(canvases[0][1])
	w, err := newFile(path)
	if err != nil {
		return err
	}
	defer w.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
