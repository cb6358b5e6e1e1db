package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// counts returns the histogram at path in a /stats document: bucket
// index to count.
func counts(s map[string]any, path []string) map[int]float64 {
	var v any = s
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	m, _ := v.(map[string]any)
	out := map[int]float64{}
	for k, c := range m {
		i, err := strconv.Atoi(k)
		f, _ := c.(float64)
		if err == nil {
			out[i] = f
		}
	}
	return out
}

// histPercentiles returns the 50th and 99th percentiles of the samples
// added between two readings of a busy histogram (1 µs buckets: each
// percentile is its bucket's middle), 0 when there are none.
func histPercentiles(h0, h1 map[int]float64) (p50, p99 int64) {
	var idx []int
	total := 0.0
	for i, c := range h1 {
		if c-h0[i] > 0 {
			idx = append(idx, i)
			total += c - h0[i]
		}
	}
	if total == 0 {
		return 0, 0
	}
	sort.Ints(idx)
	at := func(q float64) int64 {
		acc := 0.0
		for _, i := range idx {
			acc += h1[i] - h0[i]
			if acc >= q*total {
				return int64(i)*1000 + 500
			}
		}
		return int64(idx[len(idx)-1])*1000 + 500
	}
	return at(0.5), at(0.99)
}

// rrReport writes the request/response tables: the main rows (each
// firmware and interface, both boots; the firmware cell names the board
// and NIC when the rows carry them) and the copybreak sweep, with the
// command.
func rrReport(w io.Writer, rs []RRRun, command string) {
	if len(rs) == 0 {
		return
	}
	type k struct {
		fw, board, nic, proto string
		size                  int
	}
	get := func(x k, boot string) RRRun {
		var m []RRRun
		for _, r := range rs {
			if !r.Sweep && r.Firmware == x.fw && r.Board == x.board && r.NIC == x.nic && r.Boot == boot && r.Proto == x.proto && r.Size == x.size {
				m = append(m, r)
			}
		}
		return medianRR(m)
	}
	fmt.Fprintf(w, "\n### Request/response (TCP_RR, UDP_RR: one transaction outstanding, QEMU user network)\n\n`%s`\n\n", command)
	fmt.Fprintf(w, "Medians of %d runs (lost and rate-limited: sums). Transactions/s and wall latency on the plain boot (host-measured); guest busy per transaction on the icount boot (instructions: the mean is /stats busy time over the run, p50/p99 the echo's per-answer record, 1 µs buckets), with its stages and interrupts per transaction. UDP runs are paced to 90%% of the echo's per-peer limit (every host connection reaches the guest from 10.0.0.2). Under icount the echo (guest) clock runs slower than the host's while the guest is busy, so its limit can still bind: a loss halves the client's rate.\n", rrReps)
	if hasNIC(rs, "e1000e") {
		fmt.Fprintln(w, "\nThe i.MX7D's rows come from one boot per boot kind carrying both interfaces, each with its own address, echo and /stats: ENET1 on QEMU's user network 10.0.0.0/24 (copybreak 512), the 82574L (QEMU's e1000e, tx tso) on its own, 10.0.2.0/24, its host connections arriving from 10.0.2.2 (its /mode has no copybreak). The 82574L's interrupts, interrupt handler time, receive passes and endpoint stages are its own (its interrupt handler's count and time and its endpoint's stages, from its own server's /stats, checked to be the 82574L's before each run); guest busy instructions are the whole guest's (the benchmark sends the other interface nothing meanwhile; its timers still run).")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| firmware | test | bytes | trans/s (plain) | wall p50 | wall p99 | guest instr/trans (icount, mean) | p50 | p99 | IRQ handler | endpoint RX | endpoint TX | IRQs/trans | RX passes/trans | icount wall p50 / p99 | lost | rate-limited |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	seen := map[k]bool{}
	for _, r := range rs {
		key := k{r.Firmware, r.Board, r.NIC, r.Proto, r.Size}
		if seen[key] || r.Sweep {
			continue
		}
		seen[key] = true
		p, ic := get(key, "plain"), get(key, "icount")
		fw := r.Firmware
		if fw == "baseline" {
			fw = "baseline (TamaGo's ENET driver)"
		}
		if l := qemu.NICLabel(r.Board, r.NIC); l != "" {
			fw += ", " + l
		}
		fmt.Fprintf(w, "| %s | %s_RR | %d | %.0f | %s | %s | %.0f k | %s | %s | %.1f k | %.1f k | %.1f k | %.2f | %.2f | %s / %s | %d | %d |\n",
			fw, strings.ToUpper(r.Proto), r.Size, p.TPS, us(p.P50Ns), us(p.P99Ns), ic.BusyPerTxn/1e3, kinstr(ic.BusyP50Ns), kinstr(ic.BusyP99Ns),
			ic.IRQNs/1e3, ic.RxNs/1e3, ic.TxNs/1e3, ic.IRQs, ic.RxPasses, us(ic.P50Ns), us(ic.P99Ns), p.Lost+ic.Lost, p.RateLimited+ic.RateLimited)
	}
	// The receive wake-up: with interrupts, every receive pass is started
	// by one (passes per transaction at most the interrupts); a poll
	// would show passes without interrupts and latencies spread up to
	// its period.
	for _, x := range rrInterfacesOf(rs) {
		ic := get(k{"tamanic", x[0], x[1], "udp", 64}, "icount")
		if ic.N == 0 {
			continue
		}
		name, irq := "tamanic", "ENET"
		if l := qemu.NICLabel(x[0], x[1]); l != "" {
			name += ", " + l
		}
		if x[1] == "e1000e" {
			irq = "82574L"
		}
		fmt.Fprintf(w, "\nReceive wake-up (%s, UDP_RR 64 B, icount): %.2f receive passes and %.2f %s interrupts per transaction, %.1f k instructions in the interrupt handler; guest busy p50 %s, p99 %s per transaction. A pass that no interrupt started (a poll) would show as more passes than interrupts.\n",
			name, ic.RxPasses, ic.IRQs, irq, ic.IRQNs/1e3, kinstr(ic.BusyP50Ns), kinstr(ic.BusyP99Ns))
	}
	var sweep []RRRun
	for _, r := range rs {
		if r.Sweep {
			sweep = append(sweep, r)
		}
	}
	if len(sweep) == 0 {
		return
	}
	fmt.Fprintln(w, "\n#### UDP_RR across the RX copybreak (icount boot: guest instructions per transaction, mean and p50, averaged over a pass up the copybreaks and one back down)")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| copybreak |")
	for _, s := range rrCopybreakSizes {
		fmt.Fprintf(w, " %d B (frame %d) |", s, s+42)
	}
	fmt.Fprint(w, "\n|---|")
	for range rrCopybreakSizes {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, cb := range rrCopybreaks {
		fmt.Fprintf(w, "| %d |", cb)
		for _, s := range rrCopybreakSizes {
			cell := "n/a"
			var mean, p50 float64
			k := 0
			for _, r := range sweep {
				if r.Copybreak == cb && r.Size == s {
					mean, p50, k = mean+r.BusyPerTxn, p50+float64(r.BusyP50Ns), k+1
				}
			}
			if k > 0 {
				cell = fmt.Sprintf("%.1f k (p50 %s)", mean/float64(k)/1e3, kinstr(int64(p50/float64(k))))
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
}

// hasNIC reports whether any of rs ran on nic.
func hasNIC(rs []RRRun, nic string) bool {
	for _, r := range rs {
		if r.NIC == nic {
			return true
		}
	}
	return false
}

// rrInterfacesOf lists the interfaces (board, NIC) of rs in their order
// of first appearance.
func rrInterfacesOf(rs []RRRun) [][2]string {
	var out [][2]string
	seen := map[[2]string]bool{}
	for _, r := range rs {
		x := [2]string{r.Board, r.NIC}
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// medianRR returns a run whose every figure is the median of rs's, and
// whose lost and rate-limited counts are their sums.
func medianRR(rs []RRRun) RRRun {
	if len(rs) == 0 {
		return RRRun{}
	}
	r := rs[0]
	f := func(g func(RRRun) float64) float64 {
		var v []float64
		for _, x := range rs {
			v = append(v, g(x))
		}
		return median(v)
	}
	i := func(g func(RRRun) int64) int64 { return int64(f(func(x RRRun) float64 { return float64(g(x)) })) }
	r.TPS = f(func(x RRRun) float64 { return x.TPS })
	r.P50Ns, r.P99Ns = i(func(x RRRun) int64 { return x.P50Ns }), i(func(x RRRun) int64 { return x.P99Ns })
	r.BusyPerTxn = f(func(x RRRun) float64 { return x.BusyPerTxn })
	r.BusyP50Ns, r.BusyP99Ns = i(func(x RRRun) int64 { return x.BusyP50Ns }), i(func(x RRRun) int64 { return x.BusyP99Ns })
	r.IRQs, r.RxPasses = f(func(x RRRun) float64 { return x.IRQs }), f(func(x RRRun) float64 { return x.RxPasses })
	r.IRQNs, r.RxNs, r.TxNs = f(func(x RRRun) float64 { return x.IRQNs }), f(func(x RRRun) float64 { return x.RxNs }), f(func(x RRRun) float64 { return x.TxNs })
	r.Lost, r.RateLimited = 0, 0
	for _, x := range rs {
		r.Lost += x.Lost
		r.RateLimited += x.RateLimited
	}
	return r
}

// us formats ns in microseconds, or "n/a".
func us(ns int64) string {
	if ns <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f µs", float64(ns)/1e3)
}

// kinstr formats a busy percentile (ns, instructions under icount) in
// thousands, or "n/a".
func kinstr(ns int64) string {
	if ns <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f k", float64(ns)/1e3)
}

// writeRR writes the runs as rr.json and their tables as rr.md in out,
// and appends the tables to out's report.md if there is one.
func writeRR(out string, rs []RRRun, command string) error {
	var b strings.Builder
	rrReport(&b, rs, command)
	return qemu.WriteTables(out, "rr", rs, b.String())
}
