package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// BaselineMode is the TX mode the baseline firmware reports: TamaGo's own
// ENET driver joined to gVisor by usbarmory/go-net (module baseline/).
const BaselineMode = "tamago"

// buildBaseline compiles the baseline firmware for board (only mx6ullevk
// has one) from the baseline module under root, linked with the harness's
// control token like qemu.Build's images.
func buildBaseline(ctx context.Context, root, dir, board string) (string, error) {
	tool, err := exec.CommandContext(ctx, "go", "tool", "-n", "tamago").Output()
	if err != nil {
		return "", fmt.Errorf("baseline: locating the tamago tool: %w", err)
	}
	elf, err := filepath.Abs(filepath.Join(dir, "baseline-"+board+".elf"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(tool)), "build",
		"-ldflags", "-T 0x80010000 -R 0x1000 -X github.com/tamanic/tamanic/firmware/app.BuildControlToken="+qemu.ControlToken,
		"-o", elf, "./"+board)
	cmd.Dir = filepath.Join(root, "baseline")
	cmd.Env = append(os.Environ(), "GOOS=tamago", "GOOSPKG=github.com/usbarmory/tamago", "GOARCH=arm", "GOARM=7")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("baseline: building firmware: %w\n%s", err, out)
	}
	return elf, nil
}

// benchBaseline boots the baseline firmware plain and under icount, as the
// main loop boots tamanic's, and runs the same transfers (both directions,
// runs times each) and, on the plain boot, the same iperf3 tests.
func benchBaseline(ctx context.Context, elf string, size int64, runs int, iperfTime time.Duration) ([]Run, []IperfRun, error) {
	var all []Run
	var ips []IperfRun
	for _, boot := range []string{"plain", "icount"} {
		m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: board, Icount: boot == "icount"})
		if err != nil {
			return nil, nil, fmt.Errorf("baseline: %w", err)
		}
		fmt.Printf("# baseline %s boot: %s\n# %s\n", boot, m.Ready, m.CommandLine())
		if err := retry(3, 2*time.Second, func() error { return m.SetSinkHash(false) }); err != nil {
			m.Stop()
			return all, ips, fmt.Errorf("baseline %s: %w\n%s", boot, err, m.Console())
		}
		for _, dir := range []string{"tx", "rx"} {
			for i := 0; i < runs; i++ {
				r, err := transfer(m, boot, dir, BaselineMode, 0, i, size)
				if err != nil {
					m.Stop()
					return all, ips, fmt.Errorf("baseline %s %s: %w\n%s", boot, dir, err, m.Console())
				}
				fmt.Printf("run %-6s %s %-6s #%d: %7.1f Mbit/s, guest busy %6.2f M/MiB, copied %.4f B/B, %.0f frames/MiB\n",
					r.Boot, r.Dir, r.Mode, i, r.Mbps, r.BusyPerMiB/1e6, r.CopiedPerByte, r.FramesPerMiB)
				all = append(all, r)
			}
		}
		if boot == "plain" && iperfTime > 0 {
			ir, err := iperfRuns(ctx, m, []string{BaselineMode}, false, iperfTime)
			if err != nil {
				m.Stop()
				return all, ips, fmt.Errorf("baseline: %w\n%s", err, m.Console())
			}
			ips = append(ips, ir...)
		}
		m.Stop()
	}
	return all, ips, nil
}

// retry calls f up to n times, pausing between tries, and returns its
// last error. The baseline firmware (TamaGo's driver and go-net) has once
// answered its first request after READY with a closed connection under
// icount; a second try is what a user would do.
func retry(n int, pause time.Duration, f func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(pause)
		}
		if err = f(); err == nil {
			return nil
		}
		fmt.Printf("# retrying after: %v\n", err)
	}
	return err
}

// IperfRun is one run of the stock iperf3 client against a firmware's
// iperf3 server (plain boot, wall clock).
type IperfRun struct {
	Mode string `json:"mode"`
	// Dir is tx (guest to host: iperf3 -R) or rx (host to guest).
	Dir  string  `json:"dir"`
	Mbps float64 `json:"mbps"`
	// ServerCPU is the firmware's CPU load as iperf3 reports it
	// (cpu_utilization_percent.remote_total).
	ServerCPU float64 `json:"server_cpu_percent"`
}

// iperfRuns runs iperf3 for t in both directions for each TX mode
// (switching modes first when setMode). It does nothing when the iperf3
// client is not installed.
func iperfRuns(ctx context.Context, m *qemu.Machine, modes []string, setMode bool, t time.Duration) ([]IperfRun, error) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, nil
	}
	secs := fmt.Sprintf("%d", max(1, int(t/time.Second)))
	var out []IperfRun
	for _, mode := range modes {
		if setMode {
			if err := m.SetMode(mode, 512); err != nil {
				return nil, err
			}
		}
		for _, dir := range []string{"tx", "rx"} {
			args := []string{"-t", secs}
			if dir == "tx" {
				args = append(args, "-R")
			}
			rep, err := m.Iperf3(ctx, args...)
			if err != nil {
				return nil, err
			}
			bps := num(rep, "end", "sum_received", "bits_per_second")
			r := IperfRun{Mode: mode, Dir: dir, Mbps: bps / 1e6, ServerCPU: num(rep, "end", "cpu_utilization_percent", "remote_total")}
			fmt.Printf("iperf3 %s %-6s: %7.1f Mbit/s, server CPU %.1f%%\n", dir, mode, r.Mbps, r.ServerCPU)
			out = append(out, r)
		}
	}
	return out, nil
}

// baselineReport writes the ratios of every tamanic configuration against
// the baseline measured in the same run, and the iperf3 table.
func baselineReport(w io.Writer, all []Run, ips []IperfRun) {
	keys, g := groups(all)
	base := map[string]key{}
	for _, k := range keys {
		if k.mode == BaselineMode {
			base[k.dir] = k
		}
	}
	if len(base) > 0 {
		fmt.Fprintln(w, "\n### Against TamaGo's own driver (soc/nxp/enet + usbarmory/go-net, same run and harness)")
		fmt.Fprintln(w, "\nRatios to the baseline row of the same direction: instructions per MiB (icount; below 1: tamanic is cheaper) and throughput (plain; above 1: tamanic is faster).")
		fmt.Fprintln(w, "\n| direction | TX mode | copybreak | instructions per MiB | × baseline | Mbit/s | × baseline |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, k := range keys {
			b, ok := base[k.dir]
			if !ok {
				continue
			}
			cost := col(g[k]["icount"], func(r Run) float64 { return r.BusyPerMiB })
			bcost := col(g[b]["icount"], func(r Run) float64 { return r.BusyPerMiB })
			mbps := col(g[k]["plain"], func(r Run) float64 { return r.Mbps })
			bmbps := col(g[b]["plain"], func(r Run) float64 { return r.Mbps })
			fmt.Fprintf(w, "| %s | %s | %d | %.2f M | %s | %.1f | %s |\n", dirName(k.dir), k.mode, k.cb,
				cost/1e6, ratio(cost, bcost), mbps, ratio(mbps, bmbps))
		}
	}
	if len(ips) == 0 {
		return
	}
	bip := map[string]float64{}
	for _, r := range ips {
		if r.Mode == BaselineMode {
			bip[r.Dir] = r.Mbps
		}
	}
	fmt.Fprintln(w, "\n### iperf3 (stock client against the firmware's iperf3 server, plain boot)")
	fmt.Fprintln(w, "\n| direction | TX mode | Mbit/s | × baseline | server CPU (firmware's idle accounting) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range ips {
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %.1f%% |\n", dirName(r.Dir), r.Mode, r.Mbps, ratio(r.Mbps, bip[r.Dir]), r.ServerCPU)
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// profileBaseline samples the baseline firmware's program counter over one
// transfer each way, as profile does for tamanic's configurations.
func profileBaseline(ctx context.Context, elf string, size int64, every time.Duration) ([]ProfileRun, error) {
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: board, Icount: true, GDB: true})
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	defer m.Stop()
	if err := m.SetSinkHash(false); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	fmt.Printf("# baseline profile boot: %s\n", m.Ready)
	var out []ProfileRun
	for _, dir := range []string{"tx", "rx"} {
		pr, err := m.StartProfile(elf, idleFunc, every)
		if err != nil {
			return nil, err
		}
		r, terr := transfer(m, "icount+gdb", dir, BaselineMode, 0, 0, size)
		p, perr := pr.Stop()
		if terr != nil {
			return nil, fmt.Errorf("baseline profile %s: %w\n%s", dir, terr, m.Console())
		}
		if perr != nil {
			return nil, perr
		}
		out = append(out, ProfileRun{Run: r, Samples: p.Samples, Idle: p.Idle, Stages: p.ByStage(), Top: p.Top(12)})
	}
	return out, nil
}

// runBaseline builds the baseline firmware and measures it: transfers,
// iperf3 and, when profSize > 0, a profile. What it measured before an
// error is returned with the error.
func runBaseline(ctx context.Context, root, out string, size int64, runs int, iperfTime time.Duration, profSize int64) ([]Run, []IperfRun, []ProfileRun, error) {
	elf, err := buildBaseline(ctx, root, out, board)
	if err != nil {
		return nil, nil, nil, err
	}
	rs, ips, err := benchBaseline(ctx, elf, size, runs, iperfTime)
	if err != nil || profSize <= 0 {
		return rs, ips, nil, err
	}
	ps, err := profileBaseline(ctx, elf, profSize, time.Millisecond)
	return rs, ips, ps, err
}
