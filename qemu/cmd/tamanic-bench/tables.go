package main

import (
	"fmt"
	"io"
	"sort"
)

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// key is one configuration: direction (tx: guest to host), TX mode and
// RX copybreak.
type key struct {
	dir, mode string
	cb        int
}

func groups(all []Run) ([]key, map[key]map[string][]Run) {
	g := map[key]map[string][]Run{}
	var keys []key
	for _, r := range all {
		k := key{r.Dir, r.Mode, r.Copybreak}
		if g[k] == nil {
			g[k] = map[string][]Run{}
			keys = append(keys, k)
		}
		g[k][r.Boot] = append(g[k][r.Boot], r)
	}
	return keys, g
}

func col(rs []Run, f func(Run) float64) float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return median(v)
}

// stageTable splits the icount busy figure of each configuration into the
// stages the firmware times.
func stageTable(w io.Writer, all []Run) {
	keys, g := groups(all)
	fmt.Fprintln(w, "\n| direction | TX mode | copybreak | busy | NIC interrupt handler (ENET or 82574L) | endpoint RX (with gVisor IP/TCP input) | endpoint TX (placement, TSO, driver) | rest (gVisor TCP processing and output, application, scheduler) | interrupts per MiB | RX passes per MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		ic := g[k]["icount"]
		if len(ic) == 0 {
			continue
		}
		busy := col(ic, func(r Run) float64 { return r.BusyPerMiB })
		irq := col(ic, func(r Run) float64 { return r.IRQPerMiB })
		rx := col(ic, func(r Run) float64 { return r.RxPerMiB })
		tx := col(ic, func(r Run) float64 { return r.TxPerMiB })
		fmt.Fprintf(w, "| %s | %s | %d | %.2f M | %.2f M | %.2f M | %.2f M | %.2f M | %.0f | %.0f |\n", dirName(k.dir), k.mode, k.cb,
			busy/1e6, irq/1e6, rx/1e6, tx/1e6, (busy-irq-rx-tx)/1e6,
			col(ic, func(r Run) float64 { return r.IRQsPerMiB }), col(ic, func(r Run) float64 { return r.RxPassesPerMiB }))
	}
}

func table(w io.Writer, all []Run) {
	keys, g := groups(all)
	fmt.Fprintln(w, "\n| direction | TX mode | copybreak | Mbit/s (plain, median) | guest busy instructions per MiB (icount, median) | bytes copied per payload byte | descriptors per frame | frames per MiB | GSO segments per MiB | guest stack TX packets per MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		p, ic := g[k]["plain"], g[k]["icount"]
		dir := "guest→host"
		if k.dir == "rx" {
			dir = "host→guest"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.2f M | %.4f | %.2f | %.0f | %.0f | %.0f |\n", dir, k.mode, k.cb,
			col(p, func(r Run) float64 { return r.Mbps }), col(ic, func(r Run) float64 { return r.BusyPerMiB })/1e6,
			col(ic, func(r Run) float64 { return r.CopiedPerByte }), col(ic, func(r Run) float64 { return r.DescsPerFrame }),
			col(ic, func(r Run) float64 { return r.FramesPerMiB }), col(ic, func(r Run) float64 { return r.SegmentsPerMiB }),
			col(ic, func(r Run) float64 { return r.StackPktsPerMiB }))
	}
}

// times is a/b as "N.N×", or "n/a" when either figure is missing.
func times(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// mega is v in millions of instructions, or "n/a" when missing.
func mega(v float64) string {
	if v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f M", v/1e6)
}

// offloadReport states the ConnectX offload's saving as ratios of guest
// instructions per MiB (icount medians), both directions: the card's LSO
// (cx-tso) against the same card without LSO (cx-sg: checksum offload
// only, the stack segments) and against the ENET's software TSO (tso,
// copybreak 512), for the whole guest and for the endpoint's TX stage
// (placement, segmentation, driver, doorbell), where the offload acts.
// Without ConnectX runs (other boards) it writes nothing.
func offloadReport(w io.Writer, all []Run) {
	_, g := groups(all)
	med := func(dir, mode string, cb int, f func(Run) float64) float64 {
		ic := g[key{dir, mode, cb}]["icount"]
		if len(ic) == 0 {
			return 0
		}
		return col(ic, f)
	}
	busy := func(r Run) float64 { return r.BusyPerMiB }
	txStage := func(r Run) float64 { return r.TxPerMiB }
	if med("tx", "cx-tso", 0, busy) == 0 && med("rx", "cx-tso", 0, busy) == 0 {
		return
	}
	fmt.Fprintln(w, "\n### ConnectX offload: guest instructions per MiB (icount medians)")
	fmt.Fprintln(w, "\nThe card segments (LSO) and checksums; the guest pays nothing for it. Ratios are the other configuration's figure over cx-tso's.")
	fmt.Fprintln(w)
	for _, s := range []struct {
		what string
		f    func(Run) float64
	}{{"whole guest (busy)", busy}, {"endpoint TX stage (placement, segmentation, driver, doorbell)", txStage}} {
		lso, sg, enet := med("tx", "cx-tso", 0, s.f), med("tx", "cx-sg", 0, s.f), med("tx", "tso", 512, s.f)
		fmt.Fprintf(w, "- guest→host, %s: cx-tso %s, cx-sg %s, ENET tso %s: hardware LSO costs the guest %s less than no LSO (cx-sg/cx-tso) and %s less than the ENET's software TSO (tso/cx-tso)\n",
			s.what, mega(lso), mega(sg), mega(enet), times(sg, lso), times(enet, lso))
	}
	lso, enet := med("rx", "cx-tso", 0, busy), med("rx", "tso", 512, busy)
	fmt.Fprintf(w, "- host→guest, whole guest (busy): cx-tso %s, ENET tso (copybreak 512) %s: ENET/ConnectX %s (receive has no segmentation offload: the card's checksum verdict and its polling differ)\n",
		mega(lso), mega(enet), times(enet, lso))
}
