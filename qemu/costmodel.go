package qemu

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// CostConstants turn a transfer's counts into estimated core cycles:
//
//	cycles = insns × CPI + L1 read misses × L2Hit + L2 read misses × DRAMRead
//	       + lines written to DRAM × DRAMWrite + uncached accesses × Uncached
//	       + device register accesses × Device + maintenance line operations × Maint
//
// Store misses that the no-write-allocate mapping sends on to L2 or DRAM
// are not charged as stalls (the store buffer absorbs them); the lines
// they write to DRAM are, as bandwidth (DRAMWrite). Sources says where
// each constant comes from; none was fitted to a result.
type CostConstants struct {
	MHz      float64 // core clock
	LineRate float64 // the ENET's line rate, bit/s
	CPI      float64 // cycles per instruction with every access an L1 hit
	L2Hit    float64 // cycles an L1 read miss adds (L2 hit)
	DRAMRead float64 // cycles an L2 read miss adds
	// DRAMWrite is cycles per line written to DRAM (write-backs,
	// maintenance write-backs, merged write-through lines).
	DRAMWrite float64
	Uncached  float64 // cycles per access to strongly ordered RAM
	Device    float64 // cycles per device register access
	Maint     float64 // cycles per by-MVA or PL310 line operation
	Sources   map[string]string
}

// SoCCosts are the constants per CacheSoCs key.
//
// Cortex-A9 latencies: 7-cpu.com's Cortex-A9 page (Samsung Exynos 4210,
// dual Cortex-A9 at 1.2 GHz with a 1 MB 32-byte-line L2 behind the core,
// the same core and L2 arrangement as the i.MX6Q's PL310, LPDDR2-800):
// "64 K | 23 | + 19 (L2)", "+ 110 ns (RAM)", "RAM Read B/W (Parallel
// Random Read) = 68 ns / cache line = 470 MB/s", a 32-byte line (the
// page's "32 B/line"): a bandwidth, so DRAMWrite, charged per line of the
// SoC's L2, is 68 ns per 32 bytes of it (dramWrite): 136 ns for the
// Cortex-A7's 64-byte line. Not measured on an i.MX6Q (none was
// found this session): the i.MX6Q's DDR3-1066 MMDC is of the same
// generation. The Cortex-A7 rows take the same DRAM figures in
// nanoseconds (the i.MX6UL/ULL's MMDC is the i.MX6's controller, with
// DDR3L-800) and no published Cortex-A7 L2 latency was found: the A9's
// 19 cycles is used and marked so. CPI 1 is an assumption (both cores
// issue up to two instructions a cycle; no in-cache CPI for these SoCs was
// found), as is a strongly ordered or device access costing one DRAM
// round trip and a maintenance line operation one cycle plus its
// write-back (counted as a DRAM line). The sensitivity table (Sensitivity)
// shows how far each moves the answer.
var SoCCosts = map[string]CostConstants{
	"imx6ull": {MHz: 900, LineRate: 100e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 900, DRAMWrite: dramWrite(64, 900),
		Uncached: 0.110 * 900, Device: 0.110 * 900, Maint: 1, Sources: costSources("Cortex-A9 figure (no Cortex-A7 L2 latency found)")},
	"imx7d": {MHz: 1000, LineRate: 1000e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 1000, DRAMWrite: dramWrite(64, 1000),
		Uncached: 0.110 * 1000, Device: 0.110 * 1000, Maint: 1, Sources: imx7dSources()},
	"imx6q": {MHz: 996, LineRate: 400e6, CPI: 1, L2Hit: 19, DRAMRead: 0.110 * 996, DRAMWrite: dramWrite(32, 996),
		Uncached: 0.110 * 996, Device: 0.110 * 996, Maint: 1, Sources: costSources("7-cpu.com Cortex-A9 (Exynos 4210): +19 cycles")},
}

// dramWrite is the cycles at mhz to write one line of lineBytes to DRAM at
// 7-cpu.com's Exynos 4210 bandwidth, 68 ns per 32-byte line.
func dramWrite(lineBytes, mhz float64) float64 { return 0.068 * lineBytes / 32 * mhz }

func costSources(l2 string) map[string]string {
	return map[string]string{
		"CPI":       "assumed 1 (dual-issue core; no published in-cache CPI found)",
		"L2Hit":     l2,
		"DRAMRead":  "7-cpu.com Cortex-A9 (Exynos 4210, LPDDR2-800): +110 ns",
		"DRAMWrite": "7-cpu.com Cortex-A9: 68 ns per 32-byte line (470 MB/s, parallel random read), scaled to the L2's line",
		"Uncached":  "assumed one DRAM round trip (110 ns)",
		"Device":    "assumed one DRAM round trip (110 ns)",
		"Maint":     "assumed 1 cycle per line (write-back charged as a DRAM line)",
		"MHz":       "i.MX6ULL 900 MHz part (MCIMX6Y2DVM09); i.MX6Q 996 MHz (SABRE Lite)",
		"LineRate":  "ENET 100 Mbit/s (i.MX6UL/ULL); i.MX6Q ~400 Mbit/s (ERR004512)",
	}
}

// imx7dSources: the i.MX7D's constants are the i.MX6ULL's Cortex-A7
// figures; its DDR controller (DDRC, DDR3L/LPDDR3) is not the i.MX6's
// MMDC, and no latency measured on it was found: the same 7-cpu.com
// nanoseconds are used and marked so.
func imx7dSources() map[string]string {
	s := costSources("Cortex-A9 figure (no Cortex-A7 L2 latency found)")
	s["DRAMRead"] = "7-cpu.com Cortex-A9 (Exynos 4210, LPDDR2-800): +110 ns; not measured on the i.MX7D's DDRC"
	s["MHz"] = "i.MX7D 1 GHz part (the MCIMX7D-SABRE's; i.MX 7Dual data sheet IMX7DCEC); the firmware does not set the clock"
	s["LineRate"] = "1 Gbit/s: the 82574L (1000BASE-T) and the i.MX7D's ENET (RGMII)"
	return s
}

// CostConstantNames are the constants Scaled knows, in the order tables
// show them. MHz is the core clock: scaling it scales the constants that
// are nanoseconds converted to cycles (DRAMRead, DRAMWrite, Uncached,
// Device) with it, not the ones that are core cycles (CPI, L2Hit, Maint),
// and moves the CPU load at line rate.
var CostConstantNames = []string{"CPI", "L2Hit", "DRAMRead", "DRAMWrite", "Uncached", "Device", "Maint", "MHz"}

// Scaled returns k with the named constant multiplied by f.
func (k CostConstants) Scaled(name string, f float64) CostConstants {
	switch name {
	case "MHz":
		k.MHz *= f
		k.DRAMRead *= f
		k.DRAMWrite *= f
		k.Uncached *= f
		k.Device *= f
	case "CPI":
		k.CPI *= f
	case "L2Hit":
		k.L2Hit *= f
	case "DRAMRead":
		k.DRAMRead *= f
	case "DRAMWrite":
		k.DRAMWrite *= f
	case "Uncached":
		k.Uncached *= f
	case "Device":
		k.Device *= f
	case "Maint":
		k.Maint *= f
	}
	return k
}

// MaintenanceOps is the number of line maintenance operations in c.
func (c CacheCounts) MaintenanceOps() float64 {
	return c["dccmvac"] + c["dcimvac"] + c["dccimvac"] + c["pl310_clean"] + c["pl310_inv"] + c["pl310_cleaninv"]
}

// Cycles estimates the core cycles of counts c.
func (k CostConstants) Cycles(c CacheCounts) float64 {
	return c["insns"]*k.CPI + c["l1_read_miss"]*k.L2Hit + c["l2_read_miss"]*k.DRAMRead + c["dram_write"]*k.DRAMWrite +
		(c["unc_read"]+c["unc_write"])*k.Uncached + (c["dev_read"]+c["dev_write"])*k.Device + c.MaintenanceOps()*k.Maint
}

// Load is the share of the core that cycles per MiB take at line rate.
func (k CostConstants) Load(cyclesPerMiB float64) float64 {
	return cyclesPerMiB * (k.LineRate / 8 / (1 << 20)) / (k.MHz * 1e6)
}

// SensitivityPairs are the ratios of two modes' estimates a sensitivity
// table shows, per direction, where both modes ran: bounce against sg,
// TamaGo's driver against sg on the same ENET, and the 82574L's and the
// ConnectX's segmentation offload against their scatter-gather.
var SensitivityPairs = [][2]string{{"bounce", "sg"}, {"tamago", "sg"}, {"e1000e-tso", "e1000e-sg"}, {"cx-tso", "cx-sg"}}

// Sensitivity writes, for each constant halved and doubled, every run's
// estimated cycles per MiB, the ratio of each pair of modes' estimates
// (num/den, e.g. bounce/sg) per direction for the pairs of which both
// modes ran, and the range of the runs' CPU load at line rate, as a
// Markdown table. runs hold counts per MiB.
func Sensitivity(w io.Writer, k CostConstants, runs []CostRun, pairs ...[2]string) {
	ran := map[string]bool{}
	for _, r := range runs {
		ran[r.Mode] = true
	}
	var shown [][2]string
	for _, p := range pairs {
		if ran[p[0]] && ran[p[1]] {
			shown = append(shown, p)
		}
	}
	fmt.Fprintf(w, "| constant | factor | %s |", runLabels(runs))
	for _, p := range shown {
		fmt.Fprintf(w, " %s/%s tx | %s/%s rx |", p[0], p[1], p[0], p[1])
	}
	fmt.Fprint(w, " CPU load at line rate, lowest–highest |\n|---|---|")
	for range runs {
		fmt.Fprint(w, "---|")
	}
	for range shown {
		fmt.Fprint(w, "---|---|")
	}
	fmt.Fprintln(w, "---|")
	row := func(name string, f float64, kk CostConstants) {
		fmt.Fprintf(w, "| %s | %g |", name, f)
		est := map[string]float64{}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range runs {
			c := kk.Cycles(r.Cache)
			est[r.Dir+":"+r.Mode] = c
			fmt.Fprintf(w, " %.2f M |", c/1e6)
			lo, hi = math.Min(lo, kk.Load(c)), math.Max(hi, kk.Load(c))
		}
		for _, p := range shown {
			for _, d := range []string{"tx", "rx"} {
				if a, b := est[d+":"+p[0]], est[d+":"+p[1]]; a > 0 && b > 0 {
					fmt.Fprintf(w, " %.3f |", a/b)
				} else {
					fmt.Fprint(w, " - |")
				}
			}
		}
		fmt.Fprintf(w, " %.1f–%.1f%% at %.0f MHz |\n", 100*lo, 100*hi, kk.MHz)
	}
	row("(as cited)", 1, k)
	for _, n := range CostConstantNames {
		for _, f := range []float64{0.5, 2} {
			row(n, f, k.Scaled(n, f))
		}
	}
}

func runLabels(runs []CostRun) string {
	var l []string
	for _, r := range runs {
		l = append(l, r.Dir+" "+r.Mode)
	}
	return strings.Join(l, " | ")
}
