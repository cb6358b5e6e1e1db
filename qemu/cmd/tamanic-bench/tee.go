package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// The TrustZone-partitioned image's rows (make firmware BOARD=mx6ullevk
// TEE=1): the ENET driver in the Secure World, gVisor in the Normal World,
// one world call per GSO packet or frame sent and per receive batch. Its
// TX modes: tee-bounce and tee-sg (a call per frame, copied or mapped by
// the Secure World's driver) and tee-tso (a call per GSO packet, segmented
// in the Secure World).
const teePrefix = "tee-"

// teeTransfers is how many transfers runTEE makes per run count: plain and
// icount boots, bounce, sg and tso, both directions.
const teeTransfers = 2 * 3 * 2

// runTEE builds and measures the partitioned image.
func runTEE(ctx context.Context, root, out string, size int64, runs int) ([]Run, error) {
	elf, err := qemu.BuildTEE(ctx, root, out, false)
	if err != nil {
		return nil, err
	}
	var all []Run
	for _, boot := range []string{"plain", "icount"} {
		prog.note("booting the partitioned image " + boot)
		m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: "mx6ullevk", Icount: boot == "icount"})
		if err != nil {
			return all, fmt.Errorf("tee: %w", err)
		}
		fmt.Printf("# tee %s boot: %s\n# %s\n", boot, m.Ready, m.CommandLine())
		if err := m.SetSinkHash(false); err != nil {
			m.Stop()
			return all, fmt.Errorf("tee: %w", err)
		}
		for _, mode := range []string{"bounce", "sg", "tso"} {
			if err := m.SetMode(mode, 512); err != nil {
				m.Stop()
				return all, fmt.Errorf("tee: %w", err)
			}
			for _, dir := range []string{"tx", "rx"} {
				for i := 0; i < runs; i++ {
					prog.begin(boot, dir, teePrefix+mode, 512, i, size)
					r, err := measureTEE(m, boot, dir, mode, i, size)
					prog.end(r, err)
					if err != nil {
						m.Stop()
						return all, fmt.Errorf("tee %s %s %s: %w\n%s", boot, dir, mode, err, m.Console())
					}
					fmt.Printf("run %-6s %s %-10s #%d: %7.1f Mbit/s, guest busy %6.2f M/MiB, %.1f world calls/MiB, %.0f frames/MiB\n",
						r.Boot, r.Dir, r.Mode, i, r.Mbps, r.BusyPerMiB/1e6, r.WorldCallsPerMiB, r.FramesPerMiB)
					all = append(all, r)
				}
			}
		}
		m.Stop()
	}
	return all, nil
}

// measureTEE is measure for the partitioned image, whose /stats has the
// Normal World's endpoint and device (world calls) and the Secure World's
// server and driver (nic.secure). Guest busy time is the Normal World's
// uptime less the time it waited idle in the Secure World: the Secure
// World's work on its calls counts as busy. Copies count the two the
// partition adds (into the transfer region, out of it) besides the
// driver's.
func measureTEE(m *qemu.Machine, boot, dir, mode string, i int, n int64) (Run, error) {
	r := Run{Boot: boot, Dir: dir, Mode: teePrefix + mode, Copybreak: 512, N: i, Bytes: n}
	d, err := timedTransfer(&m.Ports, &r, dir, n)
	if err != nil {
		return r, err
	}
	mib := float64(n) / (1 << 20)
	r.RxPerMiB = d("nic", "endpoint", "RxNs") / mib
	r.RxPassesPerMiB = d("nic", "endpoint", "RxBatches") / mib
	r.TxPerMiB = d("nic", "endpoint", "TxNs") / mib
	r.WorldCallsPerMiB = d("nic", "device", "Calls") / mib
	drv := func(k ...string) float64 { return d(append([]string{"nic", "secure", "NIC"}, k...)...) }
	srv := func(k string) float64 { return d("nic", "secure", "Server", k) }
	if dir == "tx" {
		r.CopiedPerByte = (drv("Tx", "Copied") + 2*srv("TxBytes")) / float64(n)
		if f := drv("Tx", "Frames"); f > 0 {
			r.DescsPerFrame = drv("Tx", "Descs") / f
		}
		r.FramesPerMiB = drv("Tx", "Frames") / mib
		r.SegmentsPerMiB = drv("Tx", "GSOSegments") / mib
		r.StackPktsPerMiB = d("nic", "endpoint", "TxPackets") / mib
	} else {
		r.CopiedPerByte = (drv("Rx", "Copied") + 2*srv("RxBytes")) / float64(n)
		r.FramesPerMiB = drv("Rx", "Frames") / mib
	}
	return r, nil
}

// teeReport puts the partitioned image's rows beside the unpartitioned
// image's in the same mode.
func teeReport(w io.Writer, all []Run) {
	keys, g := groups(all)
	var rows []key
	for _, k := range keys {
		if strings.HasPrefix(k.mode, teePrefix) {
			rows = append(rows, k)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n### TrustZone partition (make firmware BOARD=mx6ullevk TEE=1) beside the unpartitioned image")
	fmt.Fprintln(w, "\nA world call is an SMC from the Normal World and the return: two world switches. Busy: the Normal World's, which includes the Secure World's work on its calls.")
	fmt.Fprintln(w, "\n| direction | TX mode | Mbit/s partitioned | Mbit/s unpartitioned | busy per MiB partitioned | busy per MiB unpartitioned | cost of the partition | world calls per MiB | world switches per MiB | bytes copied per payload byte |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range rows {
		p, ic := g[k]["plain"], g[k]["icount"]
		base := g[key{k.dir, strings.TrimPrefix(k.mode, teePrefix), 512}]
		busy := col(ic, func(r Run) float64 { return r.BusyPerMiB })
		bbusy := col(base["icount"], func(r Run) float64 { return r.BusyPerMiB })
		calls := col(ic, func(r Run) float64 { return r.WorldCallsPerMiB })
		cost := "–"
		if bbusy > 0 {
			cost = fmt.Sprintf("%+.0f%%", 100*(busy-bbusy)/bbusy)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | %.2f M | %.2f M | %s | %.0f | %.0f | %.2f |\n", dirName(k.dir), k.mode,
			col(p, func(r Run) float64 { return r.Mbps }), col(base["plain"], func(r Run) float64 { return r.Mbps }),
			busy/1e6, bbusy/1e6, cost, calls, 2*calls, col(ic, func(r Run) float64 { return r.CopiedPerByte }))
	}
}

// runTEEOnly (-tee-only) measures only the partitioned image and the
// unpartitioned image in the same modes (copybreak 512), and
// writes tee-report.md: the partition's figures without the whole bench.
func runTEEOnly(ctx context.Context, root, out string, size int64, runs int) error {
	prog.plan(2*teeTransfers*runs, size) // the unpartitioned image's and the partition's
	prog.note("building the firmware")
	elf, err := qemu.Build(ctx, root, out, "mx6ullevk")
	if err != nil {
		return err
	}
	var all []Run
	for _, boot := range []string{"plain", "icount"} {
		prog.note("booting " + boot)
		m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: "mx6ullevk", Icount: boot == "icount"})
		if err != nil {
			return err
		}
		if err := m.SetSinkHash(false); err != nil {
			m.Stop()
			return err
		}
		for _, mode := range []string{"bounce", "sg", "tso"} {
			if err := m.SetMode(mode, 512); err != nil {
				m.Stop()
				return err
			}
			for _, dir := range []string{"tx", "rx"} {
				for i := 0; i < runs; i++ {
					r, err := transfer(m, boot, dir, mode, 512, i, size)
					if err != nil {
						m.Stop()
						return fmt.Errorf("%s %s %s: %w", boot, dir, mode, err)
					}
					fmt.Printf("run %-6s %s %-10s #%d: %7.1f Mbit/s, guest busy %6.2f M/MiB\n", r.Boot, r.Dir, r.Mode, i, r.Mbps, r.BusyPerMiB/1e6)
					all = append(all, r)
				}
			}
		}
		m.Stop()
	}
	tr, err := runTEE(ctx, root, out, size, runs)
	all = append(all, tr...)
	if err != nil {
		return err
	}
	var rep strings.Builder
	fmt.Fprintf(&rep, "%d-byte transfers, %d runs each, medians\n", size, runs)
	teeReport(&rep, all)
	table(&rep, all)
	fmt.Print(rep.String())
	return os.WriteFile(filepath.Join(out, "tee-report.md"), []byte(rep.String()), 0o644)
}
