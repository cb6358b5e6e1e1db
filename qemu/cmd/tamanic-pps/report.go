package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// write writes pps.json and pps.md in out (pps-BOARD.* for a board other
// than the mx6ullevk), and appends the table to the report.md beside
// them if there is one.
func write(out string, rows []Row, command string, o options, took time.Duration) error {
	var b strings.Builder
	report(&b, rows, command, o, took)
	name := o.name
	if name == "" {
		name = outName(o.board)
	}
	return qemu.WriteTables(out, name, rows, b.String())
}

// outName is the base name of the board's files.
func outName(board string) string {
	if board == "mx6ullevk" {
		return "pps"
	}
	return "pps-" + board
}

// nicName labels a row's board and NIC: qemu.NICLabel, the 82574L with
// its bus.
func nicName(board, nic string) string {
	if nic == "e1000e" {
		return qemu.NICLabel(board, nic) + " (e1000e, PCIe)"
	}
	return qemu.NICLabel(board, nic)
}

// boardWire says how the board's NICs were wired.
func boardWire(board string) string {
	if board == "mcimx7d" {
		return "i.MX7D (mcimx7d) under QEMU: the ENET1 rows with ENET1 on a `-netdev socket,udp=` wire to a host-side peer that crafts and counts raw frames (control over a gVisor stack on the same wire, 10.0.0.0/24); the 82574L rows on a boot of their own with QEMU's e1000e behind the DesignWare PCIe root port on such a wire (10.0.2.0/24, the firmware's own control server on that address) and ENET1 on QEMU's user network, unused. No baseline: TamaGo's own driver is the ENET's, measured on the mx6ullevk."
	}
	return "mx6ullevk under QEMU, ENET1 on a `-netdev socket,udp=` wire to a host-side peer that crafts and counts raw frames (control over a gVisor stack on the same wire)."
}

// stat is a median and the spread (least, most) of some figures.
type stat struct{ med, lo, hi float64 }

func summarise(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

// report writes the table: a line per firmware, direction and setting,
// a column per size; each cell the plain boot's packets per second
// (median, and the least and most of the runs) and the icount boot's
// instructions per packet (median and spread).
func report(w io.Writer, rows []Row, command string, o options, took time.Duration) {
	if len(rows) == 0 {
		return
	}
	what, cell := "packets per second and instructions per packet", fmt.Sprintf("packets/s, the highest rate a %v trial passed at without loss (plain boot, wall time; loss from sequence numbers; median of %d searches [least–most]), then ", o.trial, o.runs)
	if !o.plain {
		what, cell = "instructions per packet", ""
	}
	fmt.Fprintf(w, "\n### Small datagrams on the %s: %s (UDP, socket netdev)\n\n`%s` (%s)\n\n", o.board, what, command, took.Round(time.Second))
	fmt.Fprintf(w, "%s Each cell: %sguest instructions per packet (icount boot, %d datagrams at %d/s, busy time less the /stats readings; median of %d runs [least–most]). rx: host→firmware (the sink), tx: firmware→host (the source). Loss in the icount runs: sum in the last column.\n\n",
		boardWire(o.board), cell, o.icountN, o.icountRate, o.icountRuns)
	type key struct {
		fw, board, nic, dir, mode string
		cb                        int
	}
	var keys []key
	seen := map[key]bool{}
	sizesSeen := map[int]bool{}
	var szs []int
	for _, r := range rows {
		k := key{r.Firmware, r.Board, r.NIC, r.Dir, r.Mode, r.Copybreak}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
		if !sizesSeen[r.Size] {
			sizesSeen[r.Size] = true
			szs = append(szs, r.Size)
		}
	}
	sort.Ints(szs)
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].dir != keys[j].dir {
			return keys[i].dir < keys[j].dir
		}
		return keys[i].fw > keys[j].fw
	})
	fmt.Fprint(w, "| firmware | NIC | direction | TX mode | copybreak |")
	for _, s := range szs {
		fmt.Fprintf(w, " %d B |", s)
	}
	fmt.Fprint(w, " icount lost |\n|---|---|---|---|---|")
	for range szs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	for _, k := range keys {
		fw := k.fw
		if fw == "baseline" {
			fw = "baseline (TamaGo's ENET driver)"
		}
		cb := cbName(k.cb)
		if k.fw != "tamanic" || k.nic == "e1000e" {
			cb = "n/a" // TamaGo's driver and the 82574L's have none
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |", fw, nicName(k.board, k.nic), k.dir, k.mode, cb)
		var lost int64
		for _, s := range szs {
			var pps, ins []float64
			lowestFail := 0.0
			for _, r := range rows {
				if (key{r.Firmware, r.Board, r.NIC, r.Dir, r.Mode, r.Copybreak}) != k || r.Size != s {
					continue
				}
				if r.Boot == "plain" {
					pps = append(pps, r.PPS)
					if r.FailPPS > 0 && (lowestFail == 0 || r.FailPPS < lowestFail) {
						lowestFail = r.FailPPS
					}
				} else {
					ins = append(ins, r.InstrPerPkt)
					lost += r.Lost
				}
			}
			cell := ""
			if p := summarise(pps); len(pps) > 0 && p.med > 0 {
				cell = fmt.Sprintf("%.0f [%.0f–%.0f]", p.med, p.lo, p.hi)
			} else if len(pps) > 0 {
				// No rate passed in half the searches or more: below the
				// lowest that failed, not a measured 0.
				cell = fmt.Sprintf("< %.0f (none passed)", lowestFail)
			}
			if i := summarise(ins); len(ins) > 0 {
				if cell != "" {
					cell += "<br>"
				}
				cell += fmt.Sprintf("%.1f k instr [%.1f–%.1f]", i.med/1e3, i.lo/1e3, i.hi/1e3)
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintf(w, " %d |\n", lost)
	}
}
