// Command tamanic-cost measures where the firmware's guest instructions go,
// exactly: it boots the firmware under QEMU with -icount shift=0,sleep=off
// (as tamanic-bench's icount boot), runs the transfers asked for, and
// prints for each the guest's busy instructions per MiB split by the
// firmware's stage timers. With -iprof it also loads a small QEMU TCG
// plugin (plugin/icprof.c, compiled with the host's C compiler on first use) that
// counts every guest instruction executed, by translation block, and
// prints the instructions per MiB of each function and stage (the names
// of qemu.Stage): unlike the PC sampling of tamanic-bench, which is
// weighted by host time (generic-timer reads and device registers weigh
// far more than their count), these are the instructions themselves.
// -callers also counts the calls into the named functions by caller (for
// runtime helpers such as runtime.duffcopy, whose cost belongs to whoever
// calls them).
//
// Example, the sg+tso guest->host transfer after one warm-up:
//
//	go run ./qemu/cmd/tamanic-cost -warm -iprof 40 -cfg tx:tso:512
//
// With -cache it also loads the cache model plugin (plugin/cachemodel.c,
// qemu.CachePlugin): every guest load and store goes through a model of
// the board's data caches (the i.MX6ULL's Cortex-A7 L1 and L2, the
// i.MX6Q's Cortex-A9 L1 and PL310), and each transfer's misses, uncached
// and device accesses and cache maintenance per MiB are printed with the
// estimated core cycles per MiB and CPU load at line rate
// (qemu.SoCCosts); after the transfers, a sensitivity table shows how the
// estimates and the bounce/sg ratio move when each constant is halved and
// doubled.
//
//	go run ./qemu/cmd/tamanic-cost -cache -size 4194304 -cfg tx:bounce:512,tx:sg:512
//
// With -baseline it measures the baseline firmware instead (TamaGo's own
// ENET driver, module baseline/, mode tamago; mx6ullevk only), whose
// memory map the plugin reads from the image (qemu.NewBaselineCachePlugin):
//
//	go run ./qemu/cmd/tamanic-cost -baseline -cache -warm -cfg tx:tamago:0,rx:tamago:0
//
// On the mcimx7d the e1000e-sg and e1000e-tso modes run on the 82574L
// (the boot then adds QEMU's e1000e), and the cx-sg and cx-tso modes, in
// a run of their own, on the co-simulated ConnectX (tamanic-cxsim, as
// tamanic-bench's co-simulated boots; the firmware is built with
// qemu.CosimXFlags).
//
// It needs qemu-system-arm with TCG plugin support (Debian's has it) and,
// for -iprof and -cache, a C compiler (cc).
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

//go:embed plugin/icprof.c
var pluginSource []byte

func flatten(prefix string, v any, out map[string]float64) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			flatten(prefix+"."+k, vv, out)
		}
	case float64:
		out[prefix] = x
	}
}

func main() {
	size := flag.Int64("size", 16<<20, "bytes per transfer")
	cfgs := flag.String("cfg", "tx:bounce:512,tx:sg:512,tx:tso:512,rx:tso:512", "transfers, comma-separated: direction (tx: guest to host, rx: host to guest), TX mode, RX copybreak")
	runs := flag.Int("runs", 1, "runs per transfer")
	warm := flag.Bool("warm", false, "one unmeasured transfer of the first configuration first (the first transfer after boot costs more)")
	board := flag.String("board", "mx6ullevk", "firmware board")
	out := flag.String("o", "build/cost", "output directory (firmware, plugin, profile dumps)")
	dump := flag.Bool("dump", false, "print every firmware counter that changed, per MiB")
	iprof := flag.Int("iprof", 0, "instruction-count profile: print the top N functions (0: none)")
	callers := flag.String("callers", "", "with -iprof: comma-separated functions whose calls to count by caller")
	jsonOut := flag.String("json", "", "also write the measured runs to this file as JSON (qemu.CostRun)")
	writeAllocate := flag.Bool("write-allocate", false, "with -cache: model store misses as allocating (Write-Back Write-Allocate) instead of the mapping's no-write-allocate")
	cache := flag.Bool("cache", false, "load the cache model plugin and print each transfer's cache counts and estimated cycles per MiB")
	baseline := flag.Bool("baseline", false, "measure the baseline firmware (TamaGo's own ENET driver with go-net, module baseline/; mx6ullevk only): its one TX mode is "+baselineMode)
	flag.Parse()
	var patches []string
	if p := os.Getenv("TAMANIC_GVISOR_PATCHES"); p != "" {
		patches = strings.Split(p, ",") // set by scripts/gvisor-patched.sh
	}
	var measured []qemu.CostRun
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if why := qemu.Missing(); why != "" {
		fail(fmt.Errorf("cannot run: %s", why))
	}
	root, _ := filepath.Abs(".")
	dir, _ := filepath.Abs(*out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	list := strings.Split(*cfgs, ",")
	// The 82574L's modes (e1000e-sg, e1000e-tso, on the mcimx7d) run on
	// the e1000e, which the boot adds on its own user network; the
	// ConnectX's (cx-sg, cx-tso) on the co-simulated ConnectX
	// (tamanic-cxsim), which needs a boot of its own (one function
	// behind QEMU's root port) and its static address (CosimXFlags).
	e1k, cx := false, false
	for _, c := range list {
		e1k = e1k || strings.Contains(c, ":e1000e-")
		cx = cx || strings.Contains(c, ":cx-")
	}
	if (e1k || cx) && *board != "mcimx7d" || e1k && cx {
		fail(fmt.Errorf("the e1000e- and cx- modes run on the mcimx7d, in separate runs"))
	}
	var elf string
	var err error
	switch {
	case *baseline:
		elf, err = buildBaseline(ctx, root, dir, *board)
	case cx:
		elf, err = qemu.Build(ctx, root, dir, *board, qemu.CosimXFlags...)
	default:
		elf, err = qemu.Build(ctx, root, dir, *board)
	}
	if err != nil {
		fail(err)
	}
	var args []string
	var sim *qemu.CXSim
	var cosimDir string
	if cx {
		if sim, cosimDir, err = startCosim(ctx, root, dir); err != nil {
			fail(err)
		}
		atExit = append(atExit, func() { sim.Kill(); os.RemoveAll(cosimDir) })
		args = append(args, qemu.CosimArgs(cosimDir)...)
	}
	var pr *profiler
	if *iprof > 0 {
		if pr, err = newProfiler(dir, elf, *callers); err != nil {
			fail(err)
		}
		args = append(args, pr.qemuArgs()...)
	}
	var cp *qemu.CachePlugin
	var soc string
	if *cache {
		if soc, err = qemu.BoardSoC(*board); err != nil {
			fail(err)
		}
		if *baseline {
			cp, err = qemu.NewBaselineCachePlugin(dir, elf, *board)
		} else {
			cp, err = qemu.NewCachePlugin(root, dir, elf, *board)
		}
		if err != nil {
			fail(err)
		}
		defer cp.Close()
		atExit = append(atExit, cp.Close)
		if *writeAllocate {
			cp.SetWriteAllocate(true)
		}
		if cx { // the co-simulation shares the guest's RAM already
			cp.UseRAMFile(filepath.Join(cosimDir, "ram"))
			args = append(args, cp.PluginArgs()...)
		} else {
			args = append(args, cp.QEMUArgs(ramSize(*board))...)
		}
	}
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: *board, Icount: true, E1000E: e1k, Args: args})
	if err != nil {
		fail(err)
	}
	defer m.Stop()
	atExit = append(atExit, func() { m.Stop() })
	fmt.Printf("# %s\n", m.CommandLine())
	if err := m.SetSinkHash(false); err != nil {
		fail(err)
	}
	if e1k {
		if m.E1000E == nil {
			fail(fmt.Errorf("board %s: no e1000e for the e1000e- modes", *board))
		}
		if err := m.E1000E.SetSinkHash(false); err != nil {
			fail(err)
		}
	}
	var cxPorts *qemu.Ports
	var peer *qemu.WirePeer
	if cx {
		if peer, err = qemu.NewWirePeer(sim.Addr, netip.MustParsePrefix(qemu.CXPeer+"/24")); err != nil {
			fail(err)
		}
		atExit = append(atExit, peer.Close)
		cxPorts = peer.Ports(qemu.CXGuest)
		if err := cxPorts.SetSinkHash(false); err != nil {
			fail(err)
		}
	}
	if *warm {
		list = append([]string{"warm:" + list[0]}, list...)
	}
	for _, c := range list {
		warmup := strings.HasPrefix(c, "warm:")
		f := strings.Split(strings.TrimPrefix(c, "warm:"), ":")
		if len(f) != 3 {
			fail(fmt.Errorf("transfer %q: want dir:mode:copybreak", c))
		}
		cb, err := strconv.Atoi(f[2])
		if err != nil {
			fail(fmt.Errorf("transfer %q: %w", c, err))
		}
		// The transfer runs on the interface of its mode; the stage
		// timers and busy time are read from ENET1's /stats (one
		// firmware, one clock).
		port := &m.Ports
		mode := f[1]
		if strings.HasPrefix(mode, "e1000e-") {
			port, mode = m.E1000E, strings.TrimPrefix(mode, "e1000e-")
		}
		if strings.HasPrefix(mode, "cx-") {
			port, mode = cxPorts, strings.TrimPrefix(mode, "cx-")
		}
		if *baseline != (f[1] == baselineMode) {
			fail(fmt.Errorf("transfer %q: the %s mode is the baseline firmware's (-baseline), and its only one", c, baselineMode))
		}
		if !*baseline { // the baseline has one mode and refuses a copybreak
			if err := port.SetMode(mode, cb); err != nil {
				fail(err)
			}
		}
		n := *runs
		if warmup {
			n = 1
		}
		for i := 0; i < n; i++ {
			var before map[uint64]uint64
			if pr != nil && !warmup {
				if before, err = pr.snapshot(); err != nil {
					fail(err)
				}
			}
			s0, err := stats(m)
			if err != nil {
				fail(err)
			}
			// The cache model's window is inside the two /stats
			// requests, so that their handling is not counted.
			var cbefore qemu.CacheSnapshot
			if cp != nil && !warmup {
				if cbefore, err = cp.Snapshot(); err != nil {
					fail(err)
				}
			}
			if f[0] == "tx" {
				_, err = port.Receive(*size, 5*time.Minute)
			} else {
				var sr qemu.SinkResult
				if sr, err = port.Send(*size, 5*time.Minute); err == nil && sr.Bytes != *size {
					err = fmt.Errorf("guest received %d of %d bytes", sr.Bytes, *size)
				}
			}
			if err != nil {
				fail(fmt.Errorf("%s: %w\n%s", c, err, m.Console()))
			}
			var cafter qemu.CacheSnapshot
			if cp != nil && !warmup {
				if cafter, err = cp.Snapshot(); err != nil {
					fail(err)
				}
			}
			s1, err := stats(m)
			if err != nil {
				fail(err)
			}
			if warmup {
				fmt.Printf("%s: done\n", c)
				continue
			}
			a, b := map[string]float64{}, map[string]float64{}
			flatten("", s0, a)
			flatten("", s1, b)
			mib := float64(*size) / (1 << 20)
			d := func(k string) float64 { return (b[k] - a[k]) / mib }
			busy := d(".uptime_ns") - d(".idle_ns")
			irq, rx, tx := d(".nic.irq_ns"), d(".nic.endpoint.RxNs"), d(".nic.endpoint.TxNs")
			fmt.Printf("%s #%d: busy %.3f M instructions/MiB: IRQ %.3f M, endpoint RX %.3f M, endpoint TX %.3f M, rest %.3f M; %.0f interrupts, %.0f RX passes per MiB\n",
				c, i, busy/1e6, irq/1e6, rx/1e6, tx/1e6, (busy-irq-rx-tx)/1e6, d(".nic.irqs"), d(".nic.endpoint.RxBatches"))
			run := qemu.CostRun{Board: *board, Dir: f[0], Mode: f[1], Copybreak: cb, Run: i,
				Bytes: *size, GVisorPatches: patches, Busy: busy, IRQ: irq, RX: rx, TX: tx}
			if cp != nil {
				run.SoC, run.Cache = soc, perMiB(cafter.Now.Sub(cbefore.Now), mib)
				run.Cycles = qemu.SoCCosts[soc].Cycles(run.Cache)
				printCache(os.Stdout, qemu.SoCCosts[soc], run)
			}
			measured = append(measured, run)
			if *dump {
				var ks []string
				for k := range b {
					if b[k] != a[k] {
						ks = append(ks, k)
					}
				}
				sort.Strings(ks)
				for _, k := range ks {
					fmt.Printf("    %-50s %14.1f per MiB\n", strings.TrimPrefix(k, "."), d(k))
				}
			}
			if pr != nil {
				after, err := pr.snapshot()
				if err != nil {
					fail(err)
				}
				pr.report(os.Stdout, before, after, mib, *iprof)
			}
		}
	}
	if cx {
		peer.Close()
		m.Stop()
		stats, err := sim.Stop()
		os.RemoveAll(cosimDir)
		if err != nil {
			fail(fmt.Errorf("tamanic-cxsim: %w", err))
		}
		fmt.Printf("# tamanic-cxsim: %s\n", stats)
		if v := sim.Violations(); len(v) > 0 {
			fail(fmt.Errorf("tamanic-cxsim reported:\n%s", strings.Join(v, "\n")))
		}
	}
	if cp != nil && len(measured) > 0 {
		fmt.Printf("\nSensitivity (%s, write-allocate %v; estimated cycles per MiB, each constant halved and doubled):\n\n", cp.SoC.Name, cp.SoC.WriteAllocate)
		qemu.Sensitivity(os.Stdout, qemu.SoCCosts[soc], measured, qemu.SensitivityPairs...)
	}
	if *jsonOut != "" {
		js, _ := json.MarshalIndent(measured, "", "  ")
		if err := os.WriteFile(*jsonOut, js, 0o644); err != nil {
			fail(err)
		}
	}
}

// stats reads the firmware's /stats on ENET1, asking again (three times
// at most, a second apart) when the request gets no answer: under the
// ConnectX co-simulation one request in a make bench-cache run ended in
// EOF. Reading the counters changes none of them (the cache model's
// window lies inside the two reads).
func stats(m *qemu.Machine) (map[string]any, error) {
	var s map[string]any
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Second)
		}
		if s, err = m.Stats(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("reading /stats: %w", err)
}

// ramSize is the -m of board's QEMU machine.
func ramSize(board string) string {
	a := qemu.Boards[board]
	for i := 0; i+1 < len(a); i++ {
		if a[i] == "-m" {
			return a[i+1]
		}
	}
	return "512M"
}

func perMiB(c qemu.CacheCounts, mib float64) qemu.CacheCounts {
	out := qemu.CacheCounts{}
	for k, v := range c {
		out[k] = v / mib
	}
	return out
}

// printCache prints a transfer's cache counts and estimate per MiB.
func printCache(w io.Writer, k qemu.CostConstants, r qemu.CostRun) {
	c := r.Cache
	fmt.Fprintf(w, "  cache model per MiB: %.3f M instructions; L1 read misses %.0f, write misses %.0f; L2 read misses %.0f; DRAM lines read %.0f, written %.0f (write-through %.0f); uncached reads %.0f, writes %.0f; device reads %.0f, writes %.0f; maintenance %.0f lines (DCCMVAC %.0f, DCIMVAC %.0f, DCCIMVAC %.0f, PL310 %.0f), %.0f written back\n",
		c["insns"]/1e6, c["l1_read_miss"], c["l1_write_miss"], c["l2_read_miss"], c["dram_read"], c["dram_write"], c["wt_lines"],
		c["unc_read"], c["unc_write"], c["dev_read"], c["dev_write"], c.MaintenanceOps(), c["dccmvac"], c["dcimvac"], c["dccimvac"],
		c["pl310_clean"]+c["pl310_inv"]+c["pl310_cleaninv"], c["maint_l1_wb"]+c["maint_l2_wb"])
	fmt.Fprintf(w, "  estimate: %.3f M cycles per MiB (instructions %.3f M, L1 misses %.3f M, L2 misses %.3f M, DRAM writes %.3f M, uncached %.3f M, device %.3f M, maintenance %.3f M); CPU load at %.0f Mbit/s and %.0f MHz: %.1f%%\n",
		r.Cycles/1e6, c["insns"]*k.CPI/1e6, c["l1_read_miss"]*k.L2Hit/1e6, c["l2_read_miss"]*k.DRAMRead/1e6, c["dram_write"]*k.DRAMWrite/1e6,
		(c["unc_read"]+c["unc_write"])*k.Uncached/1e6, (c["dev_read"]+c["dev_write"])*k.Device/1e6, c.MaintenanceOps()*k.Maint/1e6,
		k.LineRate/1e6, k.MHz, 100*k.Load(r.Cycles))
	if c["inv_dirty"] > 0 {
		fmt.Fprintf(w, "  WARNING: invalidate-address check: %.1f line invalidations per MiB discarded data the CPU wrote and did not clean (DCIMVAC or the PL310's invalidate of a dirty line: lost on silicon)\n", c["inv_dirty"])
	}
	if bad := c["mva_unknown"] + c["mva_mismatch"] + c["mva_leftover"] + c["pl310_bad"] + c["pa_mismatch"] + c["no_hwaddr"] + c["setway"] + c["dccmvau"] + c["pl310_way"]; bad > 0 {
		fmt.Fprintf(w, "  WARNING: maintenance or accesses the model could not place or does not model, per MiB: mva_unknown %.1f, mva_mismatch %.1f, mva_leftover %.1f, pl310_bad %.1f, pa_mismatch %.1f, no_hwaddr %.1f, set/way %.1f, DCCMVAU %.1f, PL310 by way %.1f\n",
			c["mva_unknown"], c["mva_mismatch"], c["mva_leftover"], c["pl310_bad"], c["pa_mismatch"], c["no_hwaddr"], c["setway"], c["dccmvau"], c["pl310_way"])
	}
}

// atExit runs before fail exits (deferred calls do not): stopping QEMU and
// removing the cache model's shared RAM file, which would otherwise keep
// the guest's touched memory in /dev/shm.
var atExit []func()

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tamanic-cost:", err)
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	os.Exit(1)
}

// buildPlugin compiles icprof.c into dir.
func buildPlugin(dir string) (string, error) {
	src, so := filepath.Join(dir, "icprof.c"), filepath.Join(dir, "icprof.so")
	if err := os.WriteFile(src, pluginSource, 0o644); err != nil {
		return "", err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src, "-lpthread").CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the QEMU plugin: %v\n%s", err, out)
	}
	return so, nil
}
