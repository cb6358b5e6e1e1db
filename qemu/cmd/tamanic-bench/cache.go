package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// cacheReport writes the cache model's estimate rows from tamanic-cost
// -cache runs (medians per board, direction and mode), the command that
// produced them, and each SoC's sensitivity table (qemu.Sensitivity).
func cacheReport(w io.Writer, runs []qemu.CostRun, command string) error {
	type key struct{ soc, dir, mode string }
	groups := map[key][]qemu.CostRun{}
	var order []key
	for _, r := range runs {
		if r.Cache == nil || r.SoC == "" {
			continue
		}
		k := key{r.SoC, r.Dir, r.Mode}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	if len(order) == 0 {
		return errors.New("cache report: no run has cache model counts (tamanic-cost -cache -json)")
	}
	fmt.Fprintf(w, "\n### Silicon cost estimate (cache model, issue 30)\n\n`%s`\n\n", command)
	fmt.Fprintln(w, "Medians of the runs of each mode (with several runs: the lowest–highest estimate beside it); × sg: the estimate over the sg row of the same SoC, direction and NIC (ENET rows and TamaGo's driver against the ENET's sg, the 82574L's against e1000e-sg, the ConnectX's against cx-sg); invalidated dirty lines: the invalidate-address check (DCIMVAC or the PL310's invalidate of a line holding data the CPU wrote and did not clean, which silicon may discard; want 0).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| SoC | direction | mode | instructions/MiB | est. cycles/MiB | × sg | L1 read misses/MiB | L2 read misses/MiB | DRAM lines read/written per MiB | uncached accesses/MiB | device accesses/MiB | maintenance lines/MiB | invalidated dirty lines/MiB | CPU load at line rate |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	bySoC := map[string][]qemu.CostRun{}
	var socs []string
	for _, k := range order {
		m := medianRun(groups[k])
		c, kk := m.Cache, qemu.SoCCosts[k.soc]
		dir := "guest→host"
		if k.dir == "rx" {
			dir = "host→guest"
		}
		est := fmt.Sprintf("%.2f M", m.Cycles/1e6)
		if g := groups[k]; len(g) > 1 {
			lo, hi := g[0].Cycles, g[0].Cycles
			for _, r := range g {
				lo, hi = min(lo, r.Cycles), max(hi, r.Cycles)
			}
			est += fmt.Sprintf(" (%d runs: %.2f–%.2f)", len(g), lo/1e6, hi/1e6)
		}
		xsg := "–"
		if sg, ok := groups[key{k.soc, k.dir, sgOf(k.mode)}]; ok {
			xsg = ratio(m.Cycles, medianRun(sg).Cycles)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f M | %s | %s | %.0f | %.0f | %.0f / %.0f | %.0f | %.0f | %.0f | %s | %.1f%% at %.0f Mbit/s, %.0f MHz |\n",
			qemu.CacheSoCs[k.soc].Name, dir, k.mode, c["insns"]/1e6, est, xsg, c["l1_read_miss"], c["l2_read_miss"],
			c["dram_read"], c["dram_write"], c["unc_read"]+c["unc_write"], c["dev_read"]+c["dev_write"], c.MaintenanceOps(),
			invChecked(c), 100*kk.Load(m.Cycles), kk.LineRate/1e6, kk.MHz)
		if bySoC[k.soc] == nil {
			socs = append(socs, k.soc)
		}
		bySoC[k.soc] = append(bySoC[k.soc], m)
	}
	for _, s := range socs {
		kk := qemu.SoCCosts[s]
		fmt.Fprintf(w, "\nSensitivity, %s (estimated cycles per MiB with each constant halved and doubled):\n\n", qemu.CacheSoCs[s].Name)
		qemu.Sensitivity(w, kk, bySoC[s], qemu.SensitivityPairs...)
		fmt.Fprintln(w, "\nConstants and their sources:")
		for _, n := range append([]string{"LineRate"}, qemu.CostConstantNames...) {
			fmt.Fprintf(w, "- %s = %g: %s\n", n, constantValue(kk, n), kk.Sources[n])
		}
	}
	return nil
}

// invChecked is the invalidate-address check's cell: the count of
// invalidated dirty lines per MiB, and, when the model could not place
// some maintenance (an MCR outside the known routines, a routine's
// argument or line count it could not follow, a PL310 store whose value
// it could not read, an access whose physical address it doubts or that
// QEMU gave none for) or saw maintenance it counts but does not apply
// (set/way operations, DCCMVAU, the PL310's by-way operations: after them
// the model's dirty lines are not silicon's), the number of those
// operations it did not check: a 0 then covers only the operations it
// placed.
func invChecked(c qemu.CacheCounts) string {
	s := fmt.Sprintf("%.1f", c["inv_dirty"])
	if u := c["mva_unknown"] + c["mva_mismatch"] + c["mva_leftover"] + c["pl310_bad"] + c["pa_mismatch"] + c["no_hwaddr"] +
		c["setway"] + c["dccmvau"] + c["pl310_way"]; u > 0 {
		s += fmt.Sprintf(" (%.1f operations or accesses not placed: unchecked)", u)
	}
	return s
}

// sgOf is the scatter-gather mode of mode's NIC: e1000e-sg for the
// 82574L's modes, cx-sg for the ConnectX's, sg otherwise (the ENET's,
// and TamaGo's driver, which drives the same ENET).
func sgOf(mode string) string {
	if nic, _, ok := strings.Cut(mode, "-"); ok {
		return nic + "-sg"
	}
	return "sg"
}

// medianRun returns the run with the median estimate.
func medianRun(rs []qemu.CostRun) qemu.CostRun {
	s := append([]qemu.CostRun(nil), rs...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Cycles < s[j-1].Cycles; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

func constantValue(k qemu.CostConstants, name string) float64 {
	switch name {
	case "MHz":
		return k.MHz
	case "LineRate":
		return k.LineRate
	}
	return map[string]float64{"CPI": k.CPI, "L2Hit": k.L2Hit, "DRAMRead": k.DRAMRead, "DRAMWrite": k.DRAMWrite,
		"Uncached": k.Uncached, "Device": k.Device, "Maint": k.Maint}[name]
}

// writeCacheReport is -cache-report: args are tamanic-cost -cache -json
// files; the table is written to out and appended to the report.md beside
// it if there is one.
func writeCacheReport(out, command string, args []string) error {
	var runs []qemu.CostRun
	for _, a := range args {
		rs, err := qemu.ReadCostRuns(a)
		if err != nil {
			return fmt.Errorf("cache report: %w", err)
		}
		runs = append(runs, rs...)
	}
	var rep strings.Builder
	if err := cacheReport(&rep, runs, command); err != nil {
		return err
	}
	png := strings.TrimSuffix(out, filepath.Ext(out)) + ".png"
	if err := drawCachePlot(runs, png); err != nil {
		return err
	}
	fmt.Fprintf(&rep, "\nPlot: %s (estimated cycles per MiB and CPU load at line rate, per SoC, mode and direction).\n", filepath.Base(png))
	return publish("cache report", out, rep.String())
}
