// Command tamanic-pps measures small-datagram packets per second (issue 33
// item 1): UDP datagrams of 18 to 1472 payload bytes to the firmware
// (receive: its sink) and from it (send: its source), on the mx6ullevk or
// the i.MX7D (-board mcimx7d: its ENET1 and its 82574L, -nics) under
// QEMU, through a socket netdev to a host-side peer in this process
// (wire.go), not QEMU's user network, which drops UDP long before the
// guest is the limit. Per row:
//
//   - packets per second: the highest rate at which a trial of
//     -trial's length lost nothing, by a search (doubling, then
//     bisection) on a plain boot (wall time); loss is counted from the
//     datagrams' sequence numbers (the firmware's sink for receive, a
//     bitmap here for send, which also checks each datagram's IPv4 and
//     UDP checksums), and a send trial also fails when the firmware
//     falls more than 5% behind the asked rate;
//   - guest instructions per packet: on a boot under -icount
//     shift=0,sleep=on (a guest nanosecond is an instruction while it
//     runs), the guest's busy time (/stats uptime_ns less idle_ns) over
//     a run of -icount-n datagrams at -icount-rate, less what the /stats
//     readings themselves cost, divided by the datagrams the guest
//     handled.
//
// Both for tamanic's firmware (receive with RX copybreak 512 and off,
// send in each TX mode; -cfg) and, on the mx6ullevk in the same run, the
// baseline firmware (TamaGo's own ENET driver, module baseline/). The
// firmware is built static (ENET1 at 10.0.0.1/24, the 82574L at
// 10.0.2.1/24: there is no DHCP server on these wires). -plain=false
// measures instructions only (the copybreak sweep of make bench), -plot
// draws the rows of earlier runs' JSON files.
//
//	go run ./qemu/cmd/tamanic-pps -runs 3 -o build/bench
//	go run ./qemu/cmd/tamanic-pps -board mcimx7d -o build/bench
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/qemu"
)

// Row is one measurement: a search's result on a plain boot, or an
// icount run.
type Row struct {
	Firmware  string `json:"firmware"` // tamanic or baseline
	Board     string `json:"board"`    // mx6ullevk or mcimx7d
	NIC       string `json:"nic"`      // enet or e1000e (mcimx7d's 82574L)
	Boot      string `json:"boot"`     // plain or icount
	Dir       string `json:"dir"`      // rx (to the firmware) or tx (from it)
	Mode      string `json:"mode"`
	Copybreak int    `json:"copybreak"` // -1: off
	Size      int    `json:"size"`      // UDP payload bytes
	Rep       int    `json:"rep"`
	// PPS is the highest rate a trial passed at (plain), Trials the
	// trials the search took, FailPPS the lowest rate one failed at (0:
	// none failed up to -max-rate).
	PPS     float64 `json:"pps,omitempty"`
	FailPPS float64 `json:"fail_pps,omitempty"`
	Trials  int     `json:"trials,omitempty"`
	// BusyAtFail is the guest's busy share (/stats, from arming to the
	// last count) in the first trial that failed: near 1, the guest is
	// what limits the rate, not the wire or the host.
	BusyAtFail float64 `json:"busy_at_fail,omitempty"`
	// icount: busy instructions per packet, the datagrams, the rate and
	// the loss of the run.
	InstrPerPkt float64 `json:"instr_per_pkt,omitempty"`
	N           int     `json:"n,omitempty"`
	Rate        int     `json:"rate,omitempty"`
	Lost        int64   `json:"lost"`
	// StatsBusyNs is what one /stats reading adds to the busy time, BgNs
	// the idle guest's background busy time over the run's window; both
	// are taken off.
	StatsBusyNs int64 `json:"stats_busy_ns,omitempty"`
	BgNs        int64 `json:"background_ns,omitempty"`
}

// sizes are the UDP payload sizes of every row.
var sizes = []int{18, 64, 256, 512, 1024, 1472}

// options are the run's settings (flags).
type options struct {
	runs       int
	trial      time.Duration
	maxRate    int
	startRate  int
	bisect     int
	icountRate int
	icountN    int
	icountRuns int
	sizes      []int
	baseline   bool
	icount     bool
	configs    []config
	// board is mx6ullevk or mcimx7d; nics the mcimx7d's NICs measured
	// (enet, e1000e), e1000eConfigs the 82574L's settings.
	board         string
	nics          []string
	e1000eConfigs []config
	plain         bool
	name          string // files' base name ("": outName(board))
}

// config is one firmware setting and direction.
type config struct {
	dir  string // rx or tx
	mode string
	cb   int
}

// defaultConfigs: receive with copybreak 512 and off (TX mode tso: it
// only moves the few ACK-less sends a sink makes), send in each TX mode
// (copybreak 512: the sender receives nothing but ARP and HTTP).
var defaultConfigs = []config{{"rx", "tso", 512}, {"rx", "tso", -1}, {"tx", "bounce", 512}, {"tx", "sg", 512}, {"tx", "tso", 512}}

// defaultE1000EConfigs: the 82574L receiving (no copybreak in its
// driver: -1) and sending with its hardware TSO on (a datagram is one
// frame either way: its TX modes differ only for TCP).
var defaultE1000EConfigs = []config{{"rx", "tso", -1}, {"tx", "tso", -1}}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 3, "searches (and icount runs) of each row; the report gives medians and the spread")
	flag.DurationVar(&o.trial, "trial", 250*time.Millisecond, "length of one trial of the rate search")
	flag.IntVar(&o.maxRate, "max-rate", 128000, "highest rate tried (datagrams/s)")
	flag.IntVar(&o.startRate, "start-rate", 1000, "first rate tried")
	flag.IntVar(&o.bisect, "bisect", 3, "bisection steps after the doubling")
	flag.IntVar(&o.icountRate, "icount-rate", 250, "rate of the icount runs (datagrams/s; below every row's loss-free rate)")
	flag.IntVar(&o.icountN, "icount-n", 500, "datagrams of an icount run")
	flag.IntVar(&o.icountRuns, "icount-runs", 2, "icount runs of each row")
	sz := flag.String("sizes", "18,64,256,512,1024,1472", "UDP payload sizes")
	cfg := flag.String("cfg", "", "configurations dir:mode:copybreak, comma-separated (default rx:tso:512,rx:tso:off,tx:bounce:512,tx:sg:512,tx:tso:512)")
	flag.BoolVar(&o.baseline, "baseline", true, "also the baseline firmware (TamaGo's ENET driver)")
	flag.BoolVar(&o.icount, "icount", true, "also the icount boots (instructions per packet)")
	flag.BoolVar(&o.plain, "plain", true, "the plain boots (the rate searches); -plain=false measures instructions per packet only")
	flag.StringVar(&o.name, "name", "", "base name of the JSON and table files (default pps, pps-BOARD for a board other than the mx6ullevk)")
	e1cfg := flag.String("e1000e-cfg", "", "the 82574L's configurations dir:mode (mode sg or tso; no copybreak), comma-separated (default rx:tso,tx:tso)")
	flag.StringVar(&o.board, "board", "mx6ullevk", "mx6ullevk or mcimx7d (its ENET1 and its 82574L, -nics; no baseline)")
	nics := flag.String("nics", "enet,e1000e", "the mcimx7d's NICs to measure: enet, e1000e")
	out := flag.String("o", "build/bench", "directory for the table and JSON files (pps.md, pps.json; -name)")
	plotOut := flag.String("plot", "", "draw the rows of the pps JSON files named as arguments into this PNG (and note it in the report.md beside it); measure nothing")
	flag.Parse()
	if *plotOut != "" {
		if err := plotFiles(*plotOut, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "tamanic-pps:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if o.sizes, err = parseSizes(*sz); err == nil {
		o.configs, err = parseConfigs(*cfg)
	}
	if err == nil {
		o.e1000eConfigs, err = parseE1000EConfigs(*e1cfg)
	}
	if err == nil {
		o.nics, err = parseBoard(&o, *nics)
	}
	if err == nil && !o.plain && !o.icount {
		err = fmt.Errorf("-plain=false and -icount=false: nothing to measure")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tamanic-pps:", err)
		os.Exit(2)
	}
	if why := qemu.Missing(); why != "" {
		fmt.Fprintln(os.Stderr, "tamanic-pps:", why)
		os.Exit(1)
	}
	command := "go run ./qemu/cmd/tamanic-pps " + strings.Join(os.Args[1:], " ")
	ctx := context.Background()
	root, err := os.Getwd()
	if err == nil {
		err = os.MkdirAll(*out, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tamanic-pps:", err)
		os.Exit(1)
	}
	start := time.Now()
	rows, err := runAll(ctx, root, *out, o)
	if werr := write(*out, rows, command, o, time.Since(start)); err == nil {
		err = werr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tamanic-pps:", err)
		os.Exit(1)
	}
}

// parseBoard checks -board and returns the NICs to measure: the
// mx6ullevk's ENET1, or the mcimx7d's from -nics. The mcimx7d has no
// baseline firmware (module baseline/ builds the mx6ullevk's).
func parseBoard(o *options, nics string) ([]string, error) {
	switch o.board {
	case "mx6ullevk":
		return []string{"enet"}, nil
	case "mcimx7d":
		o.baseline = false
	default:
		return nil, fmt.Errorf("-board: %q: want mx6ullevk or mcimx7d", o.board)
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(nics, ",") {
		if (n != "enet" && n != "e1000e") || seen[n] {
			return nil, fmt.Errorf("-nics: %q: want enet and/or e1000e, each once", n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// firmwareOptions are the build settings of the board's firmware: ENET1
// static on enetLink, and on the mcimx7d the 82574L static on
// e1000eLink (no DHCP on either wire).
func firmwareOptions(board string) qemu.BuildOptions {
	b := qemu.BuildOptions{IP: enetLink.guest.String() + fmt.Sprintf("/%d", linkBits), Gateway: enetLink.peer.String()}
	if board == "mcimx7d" {
		b.XFlags = []string{"main.E1000EDHCP=off", "main.E1000EIP=" + e1000eLink.guest.String() + fmt.Sprintf("/%d", linkBits)}
	}
	return b
}

// runAll builds the firmwares and measures every row.
func runAll(ctx context.Context, root, out string, o options) ([]Row, error) {
	elf, err := qemu.BuildWith(ctx, root, out, o.board, firmwareOptions(o.board))
	if err != nil {
		return nil, err
	}
	type fw struct{ name, elf, nic string }
	var fws []fw
	for _, n := range o.nics {
		fws = append(fws, fw{"tamanic", elf, n})
	}
	if o.baseline {
		belf, err := buildBaseline(ctx, root, out)
		if err != nil {
			return nil, err
		}
		fws = append(fws, fw{"baseline", belf, "enet"})
	}
	var boots []string
	if o.plain {
		boots = append(boots, "plain")
	}
	if o.icount {
		boots = append(boots, "icount")
	}
	var rows []Row
	for _, boot := range boots {
		for _, f := range fws {
			rs, err := runBoot(ctx, f.name, f.elf, f.nic, boot, o)
			rows = append(rows, rs...)
			if err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

// buildBaseline compiles the baseline firmware (static 10.0.0.1/24, its
// default) with the harness's control token.
func buildBaseline(ctx context.Context, root, dir string) (string, error) {
	tool, err := exec.CommandContext(ctx, "go", "tool", "-n", "tamago").Output()
	if err != nil {
		return "", fmt.Errorf("baseline: locating the tamago tool: %w", err)
	}
	elf, err := filepath.Abs(filepath.Join(dir, "baseline-mx6ullevk.elf"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(tool)), "build",
		"-ldflags", "-T 0x80010000 -R 0x1000 -X github.com/tamanic/tamanic/firmware/app.BuildControlToken="+qemu.ControlToken,
		"-o", elf, "./mx6ullevk")
	cmd.Dir = filepath.Join(root, "baseline")
	cmd.Env = append(os.Environ(), "GOOS=tamago", "GOOSPKG=github.com/usbarmory/tamago", "GOARCH=arm", "GOARM=7")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("baseline: building firmware: %w\n%s", err, b)
	}
	return elf, nil
}

// bench is one booted firmware on its wire.
type bench struct {
	m    *qemu.Machine
	w    *Wire
	nic  string // enet or e1000e
	http *http.Client
	id   uint64
	// bgPerNs is the idle guest's busy time per nanosecond (icount
	// boots: background).
	bgPerNs float64
}

// boot starts elf on board with a new wire to nic: the ENET's (ENET1
// on the socket netdev), or the 82574L's (the e1000e on the socket
// netdev, ENET1 on QEMU's user network, unused).
func boot(ctx context.Context, elf, board, nic, kind string) (*bench, error) {
	l := enetLink
	if nic == "e1000e" {
		l = e1000eLink
	}
	w, err := newWire(l)
	if err != nil {
		return nil, err
	}
	o := qemu.Options{ELF: elf, Board: board, Netdev: w.NetdevArg()}
	if nic == "e1000e" {
		o = qemu.Options{ELF: elf, Board: board, E1000E: true, E1000ENetdev: w.NetdevArg()}
	}
	if kind == "icount" {
		// sleep=on, as tamanic-bench -rr: an idle guest's clock follows
		// the host's, so its timers do not run ahead while it waits for
		// the next datagram; a running guest still counts a nanosecond
		// an instruction.
		o.Args = []string{"-icount", "shift=0,sleep=on"}
	}
	m, err := qemu.Boot(ctx, o)
	if err != nil {
		w.Close()
		return nil, err
	}
	mac, err := readyMAC(m.Ready)
	if nic == "e1000e" {
		mac, err = qemu.E1000EAddr(m.Console(), fmt.Sprintf("%s/%d", l.guest, linkBits))
	}
	if err != nil {
		m.Stop()
		w.Close()
		return nil, err
	}
	w.SetGuestMAC(mac)
	b := &bench{m: m, w: w, nic: nic, id: uint64(time.Now().UnixNano()) & (1<<40 - 1)} // far below the service's 2^62
	// One kept-alive connection for every control request (a connection
	// a request would leave TIME-WAIT endpoints whose timers cost the
	// guest: tamanic-bench's rrHTTP).
	b.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 20 * time.Second,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return w.Dial(ctx, app.HTTPPort) }}}
	return b, nil
}

func (b *bench) close() {
	b.http.CloseIdleConnections()
	b.m.Stop()
	b.w.Close()
}

// readyMAC returns the mac= of a READY line.
func readyMAC(ready string) (net.HardwareAddr, error) {
	for _, f := range strings.Fields(ready) {
		if v, ok := strings.CutPrefix(f, "mac="); ok {
			return net.ParseMAC(v)
		}
	}
	return nil, fmt.Errorf("no mac= in %q", ready)
}

// do sends a control request with the harness's token and returns the
// body; a status other than 200 is an error.
func (b *bench) do(method, path string) ([]byte, error) {
	var body []byte
	err := retry(3, 500*time.Millisecond, func() error {
		req, err := http.NewRequest(method, "http://"+b.w.link.guest.String()+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+qemu.ControlToken)
		r, err := b.http.Do(req)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		body, err = io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return err
		}
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %s: %s", method, path, r.Status, strings.TrimSpace(string(body)))
		}
		return nil
	})
	return body, err
}

// retry runs f up to n times, wait apart, until it succeeds; an HTTP
// status error is not retried.
func retry(n int, wait time.Duration, f func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if err = f(); err == nil || strings.Contains(err.Error(), ": 4") {
			return err
		}
		time.Sleep(wait)
	}
	return err
}

func (b *bench) ppsStats() (app.PPSStats, error) {
	var st app.PPSStats
	body, err := b.do(http.MethodGet, "/pps")
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	return st, err
}

// busy returns the guest's busy time and uptime from /stats.
func (b *bench) busy() (busy, uptime int64, err error) {
	body, err := b.do(http.MethodGet, "/stats")
	if err != nil {
		return 0, 0, err
	}
	var s struct {
		Up   int64 `json:"uptime_ns"`
		Idle int64 `json:"idle_ns"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return 0, 0, err
	}
	return s.Up - s.Idle, s.Up, nil
}

func (b *bench) setMode(fw string, c config) error {
	if fw != "tamanic" {
		return nil
	}
	q := fmt.Sprintf("/mode?tx=%s&copybreak=%d", c.mode, c.cb)
	if b.nic == "e1000e" {
		q = "/mode?tx=" + c.mode // its driver has no copybreak
	}
	_, err := b.do(http.MethodPost, q)
	return err
}

// runBoot boots elf and measures every row on it: the searches on a
// plain boot, the icount runs on an icount boot; the repetitions of a
// row are spread over the boot (every row once, then again), so that a
// spell of load on the shared host falls on one repetition of many rows,
// not on every repetition of one.
func runBoot(ctx context.Context, fw, elf, nic, kind string, o options) ([]Row, error) {
	b, err := boot(ctx, elf, o.board, nic, kind)
	if err != nil {
		return nil, fmt.Errorf("%s %s %s %s: %w", o.board, nic, fw, kind, err)
	}
	defer b.close()
	fmt.Printf("# %s %s %s %s boot: %s\n# %s\n", o.board, nic, fw, kind, b.m.Ready, b.m.CommandLine())
	cfgs := o.configs
	if nic == "e1000e" {
		cfgs = o.e1000eConfigs
	}
	if fw != "tamanic" {
		cfgs = []config{{"rx", "tamago", 0}, {"tx", "tamago", 0}}
	}
	// Warm-up: ARP both ways and the control connection.
	if _, err := b.rxTrial(64, 100, 20, nil, nil); err != nil {
		return nil, fmt.Errorf("%s %s %s warm-up: %w\n%s", nic, fw, kind, err, b.m.Console())
	}
	var rows []Row
	runs := o.runs
	if kind == "icount" {
		runs = o.icountRuns
		if err := b.background(); err != nil {
			return nil, err
		}
		fmt.Printf("# idle background: %.0f instructions per ms\n", b.bgPerNs*1e6)
	}
	// A row's later searches start at half its first's result (two
	// trials fewer), never above the start rate's doublings' reach.
	first := map[string]float64{}
	for rep := 0; rep < runs; rep++ {
		for _, c := range cfgs {
			if err := b.setMode(fw, c); err != nil {
				return rows, err
			}
			for _, size := range o.sizes {
				r := Row{Firmware: fw, Board: o.board, NIC: nic, Boot: kind, Dir: c.dir, Mode: c.mode, Copybreak: c.cb, Size: size, Rep: rep}
				k := fmt.Sprint(c, size)
				if kind == "plain" {
					start := o.startRate
					if p := first[k]; p > 0 {
						start = max(o.startRate/4, int(p/2))
					}
					r, err = b.search(r, o, start)
					if rep == 0 {
						first[k] = r.PPS
					}
				} else {
					r, err = b.icountRun(r, o)
				}
				if err != nil {
					return rows, fmt.Errorf("%s %s %s %s %s %d B: %w\n%s", nic, fw, kind, c.dir, c.mode, size, err, tail(b.m.Console(), 20))
				}
				if kind == "plain" {
					fmt.Printf("pps %s %s %s %-6s cb=%-4s %4d B #%d: %.0f datagrams/s without loss (failed at %.0f, guest busy %.0f%%; %d trials)\n",
						nic, fw, c.dir, c.mode, cbName(c.cb), size, rep, r.PPS, r.FailPPS, 100*r.BusyAtFail, r.Trials)
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func cbName(cb int) string {
	if cb < 0 {
		return "off"
	}
	return fmt.Sprint(cb)
}

// parseSizes parses a comma-separated list of payload sizes.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil || n < app.PPSHeader || n > app.PPSMaxSize {
			return nil, fmt.Errorf("-sizes: %q: want %d to %d", f, app.PPSHeader, app.PPSMaxSize)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseE1000EConfigs parses -e1000e-cfg (empty: defaultE1000EConfigs):
// dir:mode, mode sg or tso (the 82574L's driver has no bounce placement
// and no copybreak).
func parseE1000EConfigs(s string) ([]config, error) {
	return parseCfg("-e1000e-cfg", s, defaultE1000EConfigs, false)
}

// parseConfigs parses -cfg (empty: defaultConfigs): dir:mode:copybreak,
// copybreak a byte count or off.
func parseConfigs(s string) ([]config, error) {
	return parseCfg("-cfg", s, defaultConfigs, true)
}

// parseCfg parses flag's comma-separated configurations s (empty: def):
// dir:mode, and with enet (the ENET's: bounce placement and copybreak)
// :copybreak too; without, the copybreak is -1 (none).
func parseCfg(flag, s string, def []config, enet bool) ([]config, error) {
	if s == "" {
		return def, nil
	}
	want, fields := "rx|tx:sg|tso", 2
	if enet {
		want, fields = "rx|tx:bounce|sg|tso:copybreak|off", 3
	}
	var out []config
	for _, f := range strings.Split(s, ",") {
		p := strings.Split(f, ":")
		if len(p) != fields || (p[0] != "rx" && p[0] != "tx") || (p[1] != "sg" && p[1] != "tso" && (!enet || p[1] != "bounce")) {
			return nil, fmt.Errorf("%s: %q: want %s", flag, f, want)
		}
		c := config{dir: p[0], mode: p[1], cb: -1}
		if enet && p[2] != "off" {
			if _, err := fmt.Sscanf(p[2], "%d", &c.cb); err != nil || c.cb < 0 {
				return nil, fmt.Errorf("%s: %q: copybreak %q", flag, f, p[2])
			}
		}
		out = append(out, c)
	}
	return out, nil
}
