// Command tamanic-bench compares bounce-buffer, scatter-gather and TSO
// transmission (and RX copybreak on and off) on the tamanic firmware under
// QEMU, in one run: it builds the firmware once, boots it twice (plain, for
// wall-clock throughput; with -icount shift=0,sleep=off, where one guest
// instruction is one guest nanosecond, for CPU cost), switches modes through
// POST /mode within each boot, and runs every transfer three times.
//
// It prints every run and a Markdown table of medians, and writes the raw
// runs as JSON and a plot as PNG (bench.png: per direction, instructions
// per MiB with the runs' min–max and the TamaGo baseline drawn in, the
// same split by firmware stage, and throughput). On stderr it reports
// each transfer as it goes (board, boot, mode, direction, run i/N, its
// figure) with an estimate of the time left.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// Run is one transfer.
type Run struct {
	Boot      string  `json:"boot"` // plain or icount
	Dir       string  `json:"dir"`  // tx (guest to host) or rx (host to guest)
	Mode      string  `json:"mode"`
	Copybreak int     `json:"copybreak"`
	N         int     `json:"n"`
	Bytes     int64   `json:"bytes"`
	WallNs    int64   `json:"wall_ns"`
	Mbps      float64 `json:"mbps"`
	BusyNs    int64   `json:"guest_busy_ns"`
	// Guest busy time per MiB: instructions per MiB under icount.
	BusyPerMiB     float64 `json:"guest_busy_per_mib"`
	CopiedPerByte  float64 `json:"tx_copied_per_payload_byte"`
	DescsPerFrame  float64 `json:"tx_descs_per_frame"`
	FramesPerMiB   float64 `json:"frames_per_mib"`
	SegmentsPerMiB float64 `json:"gso_segments_per_mib"`
	// StackPktsPerMiB counts packets the stack handed the endpoint (a GSO
	// packet counts once) in the transfer's sending direction.
	StackPktsPerMiB float64 `json:"stack_packets_per_mib"`
	// Per-stage guest time per MiB (instructions under icount): the ENET
	// interrupt handler, the endpoint's receive passes (gVisor's IP and
	// TCP input run inside them) and its WritePackets calls (placement,
	// segmentation, driver), and how many interrupts and receive passes.
	IRQPerMiB      float64 `json:"irq_ns_per_mib"`
	RxPerMiB       float64 `json:"endpoint_rx_ns_per_mib"`
	TxPerMiB       float64 `json:"endpoint_tx_ns_per_mib"`
	IRQsPerMiB     float64 `json:"irqs_per_mib"`
	RxPassesPerMiB float64 `json:"rx_passes_per_mib"`
	// LSOPerMiB counts the ConnectX's LSO WQEs (each segmented by the
	// card, which the guest does not see).
	LSOPerMiB float64 `json:"lso_wqes_per_mib,omitempty"`
	// WorldCallsPerMiB counts the TrustZone partition's world calls
	// (tee.go).
	WorldCallsPerMiB float64 `json:"world_calls_per_mib,omitempty"`
}

func num(m map[string]any, path ...string) float64 {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = mm[p]
	}
	f, _ := v.(float64)
	return f
}

// board is the firmware board benchmarked (-board).
var board string

// prog reports the transfers on stderr as they go (nil: silent).
var prog *progress

func main() {
	size := flag.Int64("size", 32<<20, "bytes per transfer")
	runs := flag.Int("runs", 3, "runs per configuration")
	out := flag.String("o", "build/bench", "output directory")
	profSize := flag.Int64("profile-size", 4<<20, "bytes per profiled transfer (0: no profile)")
	profOnly := flag.Bool("profile-only", false, "only profile")
	host := flag.String("host", "", "benchstat summary of the host benchmarks, included in the report")
	flag.StringVar(&board, "board", "mx6ullevk", "firmware board (mx6ullevk, mcimx7d, sabrelite, usbarmory)")
	cmp := flag.String("compare", "", "write the boards' tables side by side to this file from the board=dir arguments' results.json, and exit")
	withBaseline := flag.Bool("baseline", true, "also build and measure the baseline firmware (TamaGo's own ENET driver with usbarmory/go-net, module baseline/; mx6ullevk only)")
	withTEE := flag.Bool("tee", true, "also build and measure the TrustZone-partitioned image (make firmware TEE=1; mx6ullevk only)")
	teeOnly := flag.Bool("tee-only", false, "only measure the TrustZone-partitioned image and the unpartitioned one in bounce, sg and tso (tee-report.md)")
	targets := flag.String("targets", "", "write issue 16's cost-target table to this file from two tamanic-cost -json files (stock, patched gVisor) given as arguments, append it to the report.md beside it if there is one, and exit")
	cacheOut := flag.String("cache-report", "", "write the cache model's estimate rows and sensitivity tables to this file from the tamanic-cost -cache -json files given as arguments, append them to the report.md beside it if there is one, and exit")
	cacheCmd := flag.String("cache-command", "go run ./qemu/cmd/tamanic-cost -cache -json FILE", "with -cache-report: the command that produced the runs, printed with the table")
	iperfTime := flag.Duration("iperf-time", 5*time.Second, "length of each iperf3 test on the plain boots, per mode and direction (0: none; skipped when the iperf3 client is not installed)")
	rr := flag.Bool("rr", false, "also run request/response (TCP_RR, UDP_RR against the TCP and UDP echo: rr.go) on the ENET of each boot (on the i.MX7D, ENET1 and the 82574L), the baseline's too, and the copybreak sweep on the icount boot (baseline and sweep: mx6ullevk only)")
	flag.BoolVar(&rrNoMerge, "rr-nomerge", true, "with -rr or -rr-only, also build the firmware without GRO and the ACK filter (make firmware GRO=off ACKFILTER=off) and run its request/response rows (mx6ullevk only)")
	flag.DurationVar(&rrTime, "rr-time", time.Second, "length of each request/response run (with -rr or -rr-only)")
	rrProf := flag.Bool("rr-profile", false, "only profile a TCP_RR and a UDP_RR run (icount with sleep=on, PC sampled through the gdbstub) for -rr-time each")
	rrOnly := flag.Bool("rr-only", false, "only build, boot and run the request/response rows (with the baseline's unless -baseline=false), writing rr.md and rr.json")
	flag.Parse()
	if !*rr && !*rrOnly && !*rrProf {
		rrTime = 0
	}
	rrCommand := "go run ./qemu/cmd/tamanic-bench " + strings.Join(os.Args[1:], " ")
	if *cmp != "" {
		var rep strings.Builder
		if err := compare(&rep, flag.Args()); err != nil {
			fail(err)
		}
		fmt.Print(rep.String())
		os.MkdirAll(filepath.Dir(*cmp), 0o755)
		if err := os.WriteFile(*cmp, []byte(rep.String()), 0o644); err != nil {
			fail(err)
		}
		return
	}
	if *cacheOut != "" {
		if err := writeCacheReport(*cacheOut, *cacheCmd, flag.Args()); err != nil {
			fail(err)
		}
		return
	}
	if *targets != "" {
		if err := writeTargets(*targets, flag.Args()); err != nil {
			fail(err)
		}
		return
	}
	if why := qemu.Missing(); why != "" {
		fmt.Fprintln(os.Stderr, "tamanic-bench: cannot run:", why)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	os.MkdirAll(*out, 0o755)
	root, _ := filepath.Abs(".")
	prog = newProgress(os.Stderr, board, *runs, time.Now)
	if *rrProf {
		if err := rrProfile(ctx, root, *out, rrTime); err != nil {
			fail(err)
		}
		return
	}
	if *rrOnly {
		if err := runRROnly(ctx, root, *out, rrTime, *withBaseline, rrCommand); err != nil {
			fail(err)
		}
		return
	}
	if *teeOnly {
		if err := runTEEOnly(ctx, root, *out, *size, *runs); err != nil {
			fail(err)
		}
		return
	}
	planTransfers(prog, board, *runs, *size, *profSize, *profOnly, *withBaseline)
	if *withTEE && board == "mx6ullevk" && !*profOnly {
		prog.plan(teeTransfers**runs, *size)
	}
	prog.note("building the firmware")
	var xflags []string
	if board == "mcimx7d" {
		// The ConnectX boots are co-simulated, whose wire peer runs no
		// DHCP server: the ConnectX static (qemu.CosimXFlags).
		xflags = qemu.CosimXFlags
	}
	elf, err := qemu.Build(ctx, root, *out, board, xflags...)
	if err != nil {
		fail(err)
	}
	var profs []ProfileRun
	if *profSize > 0 {
		prog.note("booting for the profile (icount and gdbstub)")
		profs, err = profile(ctx, elf, *profSize, time.Millisecond)
		if err != nil {
			fail(err)
		}
		js, _ := json.MarshalIndent(profs, "", "  ")
		os.WriteFile(filepath.Join(*out, "profile.json"), js, 0o644)
		if *profOnly {
			printProfiles(os.Stdout, profs)
			return
		}
	}
	var all []Run
	var ips []IperfRun
	for _, ph := range phases(board) {
		boot := ph.boot
		// On the i.MX7D the e1000e (Intel 82574L, hardware checksums and
		// TSO) is benchmarked beside the ENET, on its own user network.
		e1k := board == "mcimx7d" && !ph.cx
		// And the ConnectX, co-simulated (the model in tamanic-cxsim), in
		// boots of its own: behind QEMU's root port only one function.
		var cs *cosim
		var args []string
		if ph.cx {
			if cs, args, err = startCosim(ctx, root, *out); err != nil {
				fail(err)
			}
		}
		prog.note("booting " + boot)
		m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: board, Icount: boot == "icount", E1000E: e1k, Args: args})
		if err != nil {
			fail(err)
		}
		fmt.Printf("# %s boot: %s\n# %s\n", boot, m.Ready, m.CommandLine())
		// Host-to-guest cost is the network path's: the sink counts bytes
		// without hashing them (the QEMU test checks the data's SHA-256).
		if err := m.SetSinkHash(false); err != nil {
			m.Stop()
			fail(err)
		}
		var cfgs []key
		for _, mode := range []string{"bounce", "sg", "tso"} {
			if ph.cx {
				break
			}
			cfgs = append(cfgs, key{"tx", mode, 512})
			for _, cb := range []int{512, -1} {
				cfgs = append(cfgs, key{"rx", mode, cb})
			}
		}
		if e1k {
			if err := m.E1000E.SetSinkHash(false); err != nil {
				m.Stop()
				fail(err)
			}
			cfgs = append(cfgs, key{"tx", "e1000e-sg", 0}, key{"tx", "e1000e-tso", 0}, key{"rx", "e1000e-tso", 0})
		}
		if cs != nil {
			if err := cs.attach(); err != nil {
				m.Stop()
				fail(err)
			}
			cfgs = append(cfgs, key{"tx", "cx-sg", 0}, key{"tx", "cx-tso", 0}, key{"rx", "cx-tso", 0})
		}
		for _, c := range cfgs {
			if err := target(m, c.mode).SetMode(modeName(c.mode), c.cb); err != nil {
				m.Stop()
				fail(err)
			}
			for i := 0; i < *runs; i++ {
				r, err := transfer(m, boot, c.dir, c.mode, c.cb, i, *size)
				if err != nil {
					m.Stop()
					fail(fmt.Errorf("%s %s %s: %w\n%s", boot, c.dir, c.mode, err, m.Console()))
				}
				fmt.Printf("run %-6s %s %-6s copybreak=%-4d #%d: %7.1f Mbit/s, guest busy %6.2f M/MiB, copied %.4f B/B, %.2f desc/frame, %.0f frames/MiB, %.0f segs/MiB, %.0f stack pkts/MiB\n",
					r.Boot, r.Dir, r.Mode, r.Copybreak, i, r.Mbps, r.BusyPerMiB/1e6, r.CopiedPerByte, r.DescsPerFrame, r.FramesPerMiB, r.SegmentsPerMiB, r.StackPktsPerMiB)
				all = append(all, r)
			}
		}
		if boot == "plain" && !ph.cx && *iperfTime > 0 {
			prog.note("iperf3 tests")
			ir, err := iperfRuns(ctx, m, []string{"bounce", "sg", "tso"}, true, *iperfTime)
			if err != nil {
				m.Stop()
				fail(err)
			}
			ips = append(ips, ir...)
		}
		m.Stop()
		if cs != nil {
			if err := cs.stop(); err != nil {
				fail(err)
			}
		}
	}
	if *withBaseline && board == "mx6ullevk" {
		// Its own time budget: the main firmware's boots may have used
		// most of ctx's. A failure of the reference firmware is reported,
		// not fatal: tamanic's figures stand on their own.
		bctx, bcancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer bcancel()
		prog.note("building and measuring the baseline firmware")
		br, bi, bp, err := runBaseline(bctx, root, *out, *size, *runs, *iperfTime, *profSize)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tamanic-bench: baseline (its rows are missing from the report):", err)
		}
		all, ips, profs = append(all, br...), append(ips, bi...), append(profs, bp...)
	}

	if *withTEE && board == "mx6ullevk" {
		// Its own time budget too; a failure is reported, not fatal.
		tctx, tcancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer tcancel()
		prog.note("building and measuring the TrustZone-partitioned image")
		tr, err := runTEE(tctx, root, *out, *size, *runs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tamanic-bench: TrustZone partition (its rows are missing from the report):", err)
		}
		all = append(all, tr...)
	}

	if rrTime > 0 {
		// Request/response in boots of its own (rr.go: icount with
		// sleep=on), its own time budget; a failure is reported, not
		// fatal.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer rcancel()
		prog.note("request/response boots")
		var err error
		rrRuns, err = rrAll(rctx, root, *out, elf, *withBaseline)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tamanic-bench: request/response (its rows may be missing from the report):", err)
		}
	}

	js, _ := json.MarshalIndent(all, "", "  ")
	os.WriteFile(filepath.Join(*out, "results.json"), js, 0o644)
	js, _ = json.MarshalIndent(ips, "", "  ")
	os.WriteFile(filepath.Join(*out, "iperf3.json"), js, 0o644)
	var rep strings.Builder
	table(&rep, all)
	baselineReport(&rep, all, ips)
	teeReport(&rep, all)
	offloadReport(&rep, all)
	if len(rrRuns) > 0 {
		js, _ := json.MarshalIndent(rrRuns, "", "  ")
		os.WriteFile(filepath.Join(*out, "rr.json"), js, 0o644)
		// rr.md: the tables alone, as -rr-only leaves them, so that make
		// bench can gather every board's into one report.
		var rt strings.Builder
		rrReport(&rt, rrRuns, rrCommand)
		if err := os.WriteFile(filepath.Join(*out, "rr.md"), []byte(rt.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "tamanic-bench: request/response tables:", err)
		}
		rep.WriteString(rt.String())
	}
	fmt.Fprintln(&rep, "\n### Guest instructions per MiB by stage (icount, medians; timed by the firmware)")
	stageTable(&rep, all)
	if len(profs) > 0 {
		fmt.Fprintln(&rep, "\n### Where the guest's time goes (PC sampled every millisecond through QEMU's gdbstub under -icount)")
		printProfiles(&rep, profs)
	}
	if *host != "" {
		b, err := os.ReadFile(*host)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(&rep, "\n### Host benchmarks (benchstat)\n\n```\n%s```\n", b)
	}
	fmt.Print(rep.String())
	os.WriteFile(filepath.Join(*out, "report.md"), []byte(rep.String()), 0o644)
	if err := drawPlot(all, filepath.Join(*out, "bench.png")); err != nil {
		fail(err)
	}
	fmt.Printf("\nraw runs: %s; report: %s; plot: %s\n", filepath.Join(*out, "results.json"), filepath.Join(*out, "report.md"), filepath.Join(*out, "bench.png"))
}

func fail(err error) {
	if abandon != nil {
		abandon()
	}
	fmt.Fprintln(os.Stderr, "tamanic-bench:", err)
	os.Exit(1)
}
