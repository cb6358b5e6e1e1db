// Package plotgrid writes gonum plots as one PNG, a grid of panels two
// columns wide: the layout of every benchmark plot of the QEMU tools
// (tamanic-bench's bench and cache plots, tamanic-pps's small-datagram
// plot), so that they read alike.
package plotgrid

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Width is every grid's width in points.
const Width = 1100

// Write draws rows (each of two panels; a nil panel is left blank) into
// a PNG of Width by height points at path; what names the plot in errors.
func Write(path, what string, height float64, rows [][]*plot.Plot) error {
	for i, r := range rows {
		if len(r) != 2 {
			return fmt.Errorf("%s %s: row %d has %d panels, want 2", what, path, i, len(r))
		}
	}
	img := vgimg.New(vg.Points(Width), vg.Points(height))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 2, PadX: vg.Points(30), PadY: vg.Points(25), PadTop: vg.Points(10),
		PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j, p := range rows[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err = (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return f.Close()
}
