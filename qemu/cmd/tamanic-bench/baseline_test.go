package main

import (
	"strings"
	"testing"
)

// TestBaselineReport: each configuration's icount cost and plain
// throughput as ratios to the baseline (TamaGo's driver) row of the same
// direction, medians as in the other tables; a direction without a
// baseline row is left out; the iperf3 table's ratios are to the baseline
// iperf3 run of the same direction, a dash where there is none.
func TestBaselineReport(t *testing.T) {
	var all []Run
	all = append(all, synth("tx", BaselineMode, 0, []float64{50, 60, 40}, []float64{30e6, 20e6, 40e6}, 0, 0, 0)...)
	all = append(all, synth("tx", "tso", 512, []float64{100, 90, 120}, []float64{10e6, 12e6, 15e6}, 0, 0, 0)...)
	all = append(all, synth("rx", "tso", 512, []float64{70}, []float64{11e6}, 0, 0, 0)...) // no rx baseline
	ips := []IperfRun{
		{Mode: BaselineMode, Dir: "tx", Mbps: 40, ServerCPU: 99.5},
		{Mode: "tso", Dir: "tx", Mbps: 100, ServerCPU: 50.25},
		{Mode: "tso", Dir: "rx", Mbps: 80, ServerCPU: 60},
	}
	var w strings.Builder
	baselineReport(&w, all, ips)
	want := `
### Against TamaGo's own driver (soc/nxp/enet + usbarmory/go-net, same run and harness)

Ratios to the baseline row of the same direction: instructions per MiB (icount; below 1: tamanic is cheaper) and throughput (plain; above 1: tamanic is faster).

| direction | TX mode | copybreak | instructions per MiB | × baseline | Mbit/s | × baseline |
|---|---|---|---|---|---|---|
| guest→host | tamago | 0 | 30.00 M | 1.00 | 50.0 | 1.00 |
| guest→host | tso | 512 | 12.00 M | 0.40 | 100.0 | 2.00 |

### iperf3 (stock client against the firmware's iperf3 server, plain boot)

| direction | TX mode | Mbit/s | × baseline | server CPU (firmware's idle accounting) |
|---|---|---|---|---|
| guest→host | tamago | 40.0 | 1.00 | 99.5% |
| guest→host | tso | 100.0 | 2.50 | 50.2% |
| host→guest | tso | 80.0 | – | 60.0% |
`
	if got := w.String(); got != want {
		t.Errorf("baselineReport wrote:\n%s\nwant:\n%s", got, want)
	}
}

// TestBaselineReportNothing: without baseline runs or iperf3 runs there is
// no table at all.
func TestBaselineReportNothing(t *testing.T) {
	var w strings.Builder
	baselineReport(&w, synth("tx", "tso", 512, []float64{100}, []float64{10e6}, 0, 0, 0), nil)
	if w.Len() != 0 {
		t.Errorf("baselineReport wrote %q, want nothing", w.String())
	}
	// iperf3 alone: its table, dashes for the missing baseline.
	w.Reset()
	baselineReport(&w, nil, []IperfRun{{Mode: "sg", Dir: "rx", Mbps: 12.34, ServerCPU: 1}})
	if got := w.String(); strings.Contains(got, "Against TamaGo") || !strings.Contains(got, "| host→guest | sg | 12.3 | – | 1.0% |") {
		t.Errorf("baselineReport with iperf3 only:\n%s", got)
	}
}
