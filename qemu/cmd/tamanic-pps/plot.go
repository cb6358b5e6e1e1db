package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/tamanic/tamanic/internal/plotgrid"
)

// series is one line of the plot: a firmware on a board's NIC in one
// setting, in one direction.
type series struct {
	board, nic, fw, dir, mode string
	cb                        int
}

func (s series) label() string {
	l := nicName(s.board, s.nic)
	if s.fw != "tamanic" {
		return l + ", TamaGo's driver (baseline)"
	}
	l += " " + s.mode
	if s.nic == "enet" && s.dir == "rx" {
		l += ", copybreak " + cbName(s.cb)
	}
	return l
}

// plotRows draws rows (one board's or several boards' runs) into a PNG
// at path: a row of two panels per direction, left the guest
// instructions per datagram (icount boot, median), right the datagrams a
// second without loss (plain boot, median), against the payload size; a
// line per board, NIC, firmware and setting.
func plotRows(rows []Row, path string) error {
	var grid [][]*plot.Plot
	for _, dir := range []string{"rx", "tx"} {
		name := map[string]string{"rx": "receive (host→firmware sink)", "tx": "send (firmware source→host)"}[dir]
		ins, err := panel(rows, dir, "icount", name+": guest instructions per datagram (-icount; lower is better)", "thousand instructions",
			func(r Row) float64 { return r.InstrPerPkt / 1e3 })
		if err != nil {
			return err
		}
		pps, err := panel(rows, dir, "plain", name+": datagrams/s without loss (wall clock; higher is better)", "datagrams/s",
			func(r Row) float64 { return r.PPS })
		if err != nil {
			return err
		}
		if ins != nil || pps != nil {
			grid = append(grid, []*plot.Plot{ins, pps})
		}
	}
	if len(grid) == 0 {
		return fmt.Errorf("plot: no rows to draw")
	}
	return plotgrid.Write(path, "plot", 450*float64(len(grid)), grid)
}

// panel is one direction's figure f (median over the repetitions) of the
// boot's rows against the payload size, or nil if there are none.
func panel(rows []Row, dir, boot, title, ylabel string, f func(Row) float64) (*plot.Plot, error) {
	vals := map[series]map[int][]float64{}
	var order []series
	for _, r := range rows {
		if r.Dir != dir || r.Boot != boot {
			continue
		}
		s := series{r.Board, r.NIC, r.Firmware, r.Dir, r.Mode, r.Copybreak}
		if vals[s] == nil {
			vals[s] = map[int][]float64{}
			order = append(order, s)
		}
		vals[s][r.Size] = append(vals[s][r.Size], f(r))
	}
	if len(order) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "UDP payload bytes"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	var args []any
	top := 0.0
	for _, s := range order {
		var szs []int
		for sz := range vals[s] {
			szs = append(szs, sz)
		}
		sort.Ints(szs)
		xy := make(plotter.XYs, len(szs))
		for i, sz := range szs {
			xy[i].X, xy[i].Y = float64(sz), summarise(vals[s][sz]).med
			top = max(top, xy[i].Y)
		}
		args = append(args, s.label(), xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	// Room above the lines for the legend's entries.
	p.Y.Max = top * (1.1 + 0.07*float64(len(order)))
	return p, nil
}

// plotFiles reads the rows of pps JSON files (one per board) and draws
// them into the PNG at path, then notes the plot in the report.md beside
// it, if there is one.
func plotFiles(path string, files []string) error {
	var rows []Row
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		var rs []Row
		if err := json.Unmarshal(b, &rs); err != nil {
			return fmt.Errorf("plot: %s: %w", fn, err)
		}
		for i := range rs {
			if rs[i].Board == "" { // files written before rows named them
				rs[i].Board, rs[i].NIC = "mx6ullevk", "enet"
			}
		}
		rows = append(rows, rs...)
	}
	if err := plotRows(rows, path); err != nil {
		return err
	}
	rep := filepath.Join(filepath.Dir(path), "report.md")
	if _, err := os.Stat(rep); err != nil {
		return nil
	}
	f, err := os.OpenFile(rep, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintf(f, "\nPlot: %s (small datagrams: guest instructions per datagram and datagrams/s without loss against the payload size, per board, NIC and setting; from %d rows of the tables above).\n", filepath.Base(path), len(rows))
	return f.Close()
}
