package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// Request/response (issue 33, item 2): netperf's TCP_RR and UDP_RR with
// one transaction outstanding, against the firmware's TCP echo and UDP
// echo (port 7, package firmware/app) through QEMU's user network. A
// transaction is one request of Size bytes and its echo. Per run:
//
//   - transactions a second and the wall-time latency percentiles of
//     each transaction, measured on the host (plain boot: the guest runs
//     in real time);
//   - the guest's busy time per transaction, the mean from /stats
//     (uptime_ns less idle_ns over the run, divided by the transactions:
//     "busy per MiB" per transaction) and its percentiles from the
//     echo's own per-answer record (firmware/app/busyhist.go, 1 µs
//     buckets). Under -icount shift=0 a nanosecond is an instruction;
//     with one request outstanding and an interrupt-driven receive the
//     guest's time from the request's arrival to its answer is at most
//     this busy time;
//   - the interrupts, receive passes and the firmware's stage times per
//     transaction.
//
// The UDP echo is rate-limited per peer address (Limits.EchoRate, every
// host connection arrives from QEMU's 10.0.0.2, whatever its port), so a
// UDP run is paced to rrUDPShare of the limit the firmware reports; the
// TCP echo has no rate limit.
//
// On the i.MX7D one boot carries two interfaces, each with its own
// address and its own instance of the services (firmware/mcimx7d): ENET1
// on QEMU's user network 10.0.0.0/24 and the 82574L (QEMU's e1000e,
// qemu.Options.E1000E) on its own, 10.0.2.0/24. Each interface's rows talk
// to its own echo and read its own /stats, whose "nic" member is that
// interface's: its interrupts, interrupt handler time and endpoint stages
// (the 82574L's server reports the e1000e driver's, firmware/mcimx7d's
// e1000eStats). The guest's busy time is the whole guest's.

// RRRun is one request/response run.
type RRRun struct {
	Firmware  string `json:"firmware"` // tamanic or baseline
	Board     string `json:"board"`    // mx6ullevk or mcimx7d
	NIC       string `json:"nic"`      // enet or e1000e (the i.MX7D's 82574L)
	Boot      string `json:"boot"`     // plain or icount
	Proto     string `json:"proto"`    // tcp or udp
	Size      int    `json:"size"`     // request and response bytes
	Mode      string `json:"mode"`
	Copybreak int    `json:"copybreak"`
	N         int    `json:"transactions"`
	// Lost counts UDP requests with no answer within rrUDPTimeout
	// (retried; not in N).
	Lost   int     `json:"lost"`
	WallNs int64   `json:"wall_ns"`
	TPS    float64 `json:"transactions_per_s"`
	// PaceNs is the least time between UDP requests (0: unpaced).
	PaceNs int64 `json:"pace_ns,omitempty"`
	// Wall-time latency percentiles (host).
	P50Ns int64 `json:"wall_p50_ns"`
	P99Ns int64 `json:"wall_p99_ns"`
	// Guest busy time per transaction: mean (from /stats) and the
	// percentiles of the echo's record.
	BusyPerTxn float64 `json:"guest_busy_per_txn"`
	// StatsBusyNs is what one /stats reading adds to the busy time
	// between two readings (measured before the run, taken off
	// BusyPerTxn's total).
	StatsBusyNs int64 `json:"stats_busy_ns"`
	BusyP50Ns   int64 `json:"guest_busy_p50_ns"`
	BusyP99Ns   int64 `json:"guest_busy_p99_ns"`
	// Per transaction: the NIC's interrupts, endpoint receive passes,
	// time in the interrupt handler, the endpoint's receive and send
	// stages (each from the NIC's own /stats "nic" member).
	IRQs     float64 `json:"irqs_per_txn"`
	RxPasses float64 `json:"rx_passes_per_txn"`
	IRQNs    float64 `json:"irq_ns_per_txn"`
	RxNs     float64 `json:"endpoint_rx_ns_per_txn"`
	TxNs     float64 `json:"endpoint_tx_ns_per_txn"`
	// RateLimited is the UDP echo's rate_limited count over the run.
	RateLimited int64 `json:"rate_limited"`
	// Sweep marks the copybreak sweep's runs; Rep numbers a main row's
	// runs (rrReps of each).
	Sweep bool `json:"sweep,omitempty"`
	Rep   int  `json:"rep"`
}

const (
	// rrWarmup transactions precede each run's measurement (ARP, the
	// connection, the echo's first answer, which its record only marks).
	rrWarmup = 20
	// rrUDPTimeout is how long a UDP request waits for its answer before
	// it is counted lost and sent again (answers take under 10 ms at the
	// 99th percentile; a late one is told apart by its bytes). A loss
	// also halves the client's rate: under icount the guest's clock, by
	// which the echo's limit refills, runs slower than the host's while
	// the guest is busy.
	rrUDPTimeout = 100 * time.Millisecond
	// rrUDPShare is the share of the echo's per-peer rate a UDP run is
	// paced to.
	rrUDPShare = 0.9
	// rrUDPBurst is the client's burst, a fifth of the echo's default
	// (Limits.EchoBurst, 100).
	rrUDPBurst = 20
)

// rrTime is the length of each request/response run (0: none: -rr is
// off), and rrRuns the runs made so far (the baseline's included).
var (
	rrTime time.Duration
	rrRuns []RRRun
)

// rrReps is how many runs of each main row a boot makes (the report
// gives each figure's median): the plain boots' figures move by a
// factor of two from run to run on a loaded host.
const rrReps = 3

// rrSizes are the request and response sizes of the main rows.
var rrSizes = []int{1, 64}

// rrCopybreaks and rrCopybreakSizes are the copybreak sweep's settings
// (UDP_RR, icount boot): frames of 106, 298 and 1066 bytes (UDP payload
// plus 42 bytes of headers) either side of each threshold.
var (
	rrCopybreaks     = []int{0, 128, 256, 512, 1024}
	rrCopybreakSizes = []int{64, 256, 1024}
)

// rrBoot runs the request/response rows on one boot's interface m: TCP
// and UDP at each of rrSizes in mode (copybreak cb), then, if sweep,
// UDP_RR over rrCopybreaks and rrCopybreakSizes. Each row is row (its
// firmware, boot, board and NIC) with the run's settings and figures.
// The mode is set on the tamanic firmware only (the others have one) and
// left at (mode, cb).
func rrBoot(m *qemu.Ports, row RRRun, mode string, cb int, dur time.Duration, sweep bool) ([]RRRun, error) {
	var out []RRRun
	firmware := row.Firmware
	set := func(c int) error {
		if firmware != "tamanic" {
			return nil
		}
		if err := m.SetMode(mode, c); err != nil {
			return fmt.Errorf("%s: POST /mode tx=%s copybreak=%d: %w", qemu.NICLabel(row.Board, row.NIC), mode, c, err)
		}
		return nil
	}
	if err := set(cb); err != nil {
		return nil, err
	}
	for i := 0; i < rrReps; i++ {
		for _, proto := range []string{"tcp", "udp"} {
			for _, size := range rrSizes {
				r := row
				r.Proto, r.Size, r.Mode, r.Copybreak, r.Rep = proto, size, mode, cb, i
				r, err := rrRun(m, r, dur)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		}
	}
	if sweep && firmware == "tamanic" {
		// Up the copybreaks and back down: a transaction's cost drifted
		// up over a minute of runs (each runtime timer pending in the
		// guest, a TIME-WAIT endpoint's or a closed connection's
		// deadline, made every wake-up dearer: rrHTTP), which one pass
		// would read as a cost of the larger copybreaks. The report
		// averages the two passes, in case some drift remains.
		order := append(append([]int{}, rrCopybreaks...), rrCopybreaks...)
		for i, j := len(rrCopybreaks), len(order)-1; i < j; i, j = i+1, j-1 {
			order[i], order[j] = order[j], order[i]
		}
		for pass, c := range order {
			if err := set(c); err != nil {
				return out, err
			}
			for _, size := range rrCopybreakSizes {
				r := row
				r.Proto, r.Size, r.Mode, r.Copybreak, r.Sweep, r.Rep = "udp", size, mode, c, true, pass/len(rrCopybreaks)
				r, err := rrRun(m, r, dur)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		}
		if err := set(cb); err != nil {
			return out, err
		}
	}
	return out, nil
}

// rrRun runs transactions of r.Size bytes over r.Proto for dur and fills
// r's figures.
func rrRun(m *qemu.Ports, r RRRun, dur time.Duration) (RRRun, error) {
	prog.note(fmt.Sprintf("%s %s %s %s_RR %d bytes, copybreak %s", r.Firmware, qemu.NICLabel(r.Board, r.NIC), r.Boot, strings.ToUpper(r.Proto), r.Size, cbName(r.Copybreak)))
	// /stats is tried again on a failure: a request right after READY,
	// or after a burst, has once been answered with a closed connection
	// (retry in baseline.go).
	stats := func() (map[string]any, error) {
		var s map[string]any
		err := retry(3, time.Second, func() error {
			var err error
			s, err = rrStats(m)
			return err
		})
		return s, err
	}
	s0, err := stats()
	if err != nil {
		return r, err
	}
	if err := rrCheckStats(s0, r); err != nil {
		return r, fmt.Errorf("/stats at 127.0.0.1:%d: %w", m.HTTPPort, err)
	}
	var txn func(seq int) (time.Duration, error)
	var lost *int
	hist := []string{"limits", "tcp_echo_busy", "counts"}
	switch r.Proto {
	case "tcp":
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.EchoPort), 10*time.Second)
		if err != nil {
			return r, fmt.Errorf("TCP echo: %w", err)
		}
		defer c.Close()
		txn = tcpTxn(c, r.Size)
	default:
		c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", m.EchoPort))
		if err != nil {
			return r, fmt.Errorf("UDP echo: %w", err)
		}
		defer c.Close()
		if rate := num(s0, "limits", "echo", "rate"); rate > 0 {
			r.PaceNs = int64(float64(time.Second) / (rrUDPShare * rate))
		}
		lost = &r.Lost
		txn = udpTxn(c, r.Size, time.Duration(r.PaceNs), lost)
		hist = []string{"limits", "echo", "busy", "counts"}
	}
	for i := range rrWarmup {
		if _, err := txn(i); err != nil {
			return r, fmt.Errorf("%s_RR warm-up: %w", r.Proto, err)
		}
	}
	r.Lost = 0
	// Two readings with no transaction between: what a reading itself
	// adds to the busy time between two (the first's work after it took
	// uptime_ns, the second's before: the encoding, the runtime's
	// statistics, HTTP; /stats costs millions of instructions) is then
	// taken off the run's.
	sa, err := stats()
	if err != nil {
		return r, err
	}
	s0, err = stats()
	if err != nil {
		return r, err
	}
	busy := func(s map[string]any) float64 { return num(s, "uptime_ns") - num(s, "idle_ns") }
	r.StatsBusyNs = int64(busy(s0) - busy(sa))
	var lat []time.Duration
	start := time.Now()
	for seq := rrWarmup; time.Since(start) < dur; seq++ {
		d, err := txn(seq)
		if err != nil {
			return r, fmt.Errorf("%s_RR transaction %d: %w", r.Proto, len(lat), err)
		}
		lat = append(lat, d)
	}
	r.WallNs = int64(time.Since(start))
	s1, err := stats()
	if err != nil {
		return r, err
	}
	d := func(path ...string) float64 { return num(s1, path...) - num(s0, path...) }
	n := float64(len(lat))
	r.N = len(lat)
	r.TPS = n / (float64(r.WallNs) / 1e9)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.P50Ns, r.P99Ns = int64(lat[len(lat)/2]), int64(lat[min(len(lat)-1, len(lat)*99/100)])
	r.BusyPerTxn = (d("uptime_ns") - d("idle_ns") - float64(r.StatsBusyNs)) / n
	r.BusyP50Ns, r.BusyP99Ns = histPercentiles(counts(s0, hist), counts(s1, hist))
	r.IRQs, r.IRQNs = d("nic", "irqs")/n, d("nic", "irq_ns")/n
	r.RxPasses = d("nic", "endpoint", "RxBatches") / n
	r.RxNs, r.TxNs = d("nic", "endpoint", "RxNs")/n, d("nic", "endpoint", "TxNs")/n
	r.RateLimited = int64(d("limits", "echo", "rate_limited"))
	fmt.Printf("rr %-8s %-14s %-6s %s_RR %4d B copybreak=%-4s: %7.0f trans/s, wall p50 %s p99 %s, guest busy %.0f ns/trans (p50 %d p99 %d; irq %.0f, rx %.0f, tx %.0f), %.2f irqs/trans, %.2f rx passes/trans, lost %d, rate-limited %d\n",
		r.Firmware, qemu.NICLabel(r.Board, r.NIC), r.Boot, strings.ToUpper(r.Proto), r.Size, cbName(r.Copybreak), r.TPS, time.Duration(r.P50Ns), time.Duration(r.P99Ns),
		r.BusyPerTxn, r.BusyP50Ns, r.BusyP99Ns, r.IRQNs, r.RxNs, r.TxNs, r.IRQs, r.RxPasses, r.Lost, r.RateLimited)
	return r, nil
}

// rrCheckStats checks that s, a /stats document read before run r, is
// the interface r names (r.NIC) in the mode r says, so that no row
// carries another interface's counters or mode. The baseline's /stats
// has neither (its "nic" member is its own), so its rows go unchecked.
func rrCheckStats(s map[string]any, r RRRun) error {
	if r.Firmware == "baseline" {
		return nil
	}
	if got := statsNIC(s); got != r.NIC {
		return fmt.Errorf("the document is NIC %q's, the row %q's", got, r.NIC)
	}
	if r.Firmware != "tamanic" {
		// Not set by rrBoot: the build's own mode.
		return nil
	}
	tx, _ := s["tx_mode"].(string)
	cb, ok := s["copybreak"].(float64)
	if tx != r.Mode || !ok || int(cb) != r.Copybreak {
		return fmt.Errorf("the interface is in tx_mode %q copybreak %v, the row in %q %d", tx, s["copybreak"], r.Mode, r.Copybreak)
	}
	return nil
}

// statsNIC names the interface a tamanic /stats document describes by
// the members of its "nic" member that only that interface's driver
// reports: "enet" for the ENET's (its MIB counters, app.NICStats),
// "e1000e" for the 82574L's (its statistics registers, firmware/mcimx7d's
// e1000eStats), "" for neither or both.
func statsNIC(s map[string]any) string {
	n, _ := s["nic"].(map[string]any)
	_, mib := n["mib"].(map[string]any)
	_, hw := n["hw"].(map[string]any)
	switch {
	case mib && !hw:
		return "enet"
	case hw && !mib:
		return "e1000e"
	}
	return ""
}

// rrHTTP reads /stats for the request/response runs over one kept-alive
// connection, which the client gives up after 10 s idle (the firmware's
// HTTP idle timeout is 30 s, so it is never the firmware that closes it).
// qemu.Ports.Stats opens a connection a reading, and the firmware closes
// each: every reading left an endpoint in TIME-WAIT for a minute, whose
// runtime timer made every later transaction dearer (about 500 guest
// instructions each: the Go runtime's timer heap is scanned whole when a
// modified timer comes due, timers.adjust), and the runs' cost drifted
// up by 1 k instructions a run.
var rrHTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 10 * time.Second}}

// rrStats fetches /stats through rrHTTP (GET, which Go's client retries
// on a kept-alive connection found closed).
func rrStats(m *qemu.Ports) (map[string]any, error) {
	// The echoes' busy histograms come with ?busy=1 and the token only.
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/stats?busy=1", m.HTTPPort), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+qemu.ControlToken)
	r, err := rrHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var s map[string]any
	return s, json.NewDecoder(r.Body).Decode(&s)
}

// tcpTxn returns a transaction on c: size bytes out, the same back.
func tcpTxn(c net.Conn, size int) func(int) (time.Duration, error) {
	req, resp := make([]byte, size), make([]byte, size)
	return func(seq int) (time.Duration, error) {
		for i := range req {
			req[i] = byte(seq + i)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return 0, err
		}
		d := time.Since(t0)
		if !bytes.Equal(req, resp) {
			return 0, errors.New("TCP echo answered other bytes")
		}
		return d, nil
	}
}

// udpTxn returns a transaction on c: a datagram of size bytes out (its
// bytes numbered by seq, so a late answer to an earlier request is told
// apart and skipped), its echo back; a request unanswered within
// rrUDPTimeout counts in lost and is sent again (the latency is the
// answered try's). Requests start at least pace apart.
func udpTxn(c net.Conn, size int, pace time.Duration, lost *int) func(int) (time.Duration, error) {
	req, resp := make([]byte, size), make([]byte, 2048)
	// A token bucket like the echo's own (a token every pace, rrUDPBurst
	// at most), so that the client sleeps only when it runs ahead of the
	// limit, not before every request (a sleep of a fraction of a
	// millisecond costs the host a millisecond or more).
	tokens, last := float64(rrUDPBurst), time.Now()
	return func(seq int) (time.Duration, error) {
		for i := range req {
			req[i] = byte(seq + i)
		}
		for try := 0; try < 10; try++ {
			if pace > 0 {
				now := time.Now()
				tokens = min(rrUDPBurst, tokens+float64(now.Sub(last))/float64(pace))
				last = now
				if tokens < 1 {
					time.Sleep(time.Duration((1 - tokens) * float64(pace)))
					now = time.Now()
					tokens += float64(now.Sub(last)) / float64(pace)
					last = now
				}
				tokens--
			}
			t0 := time.Now()
			if _, err := c.Write(req); err != nil {
				return 0, err
			}
			c.SetReadDeadline(t0.Add(rrUDPTimeout))
			for {
				k, err := c.Read(resp)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					*lost++
					if pace > 0 {
						pace *= 2
					}
					break
				}
				if err != nil {
					return 0, err
				}
				if bytes.Equal(resp[:k], req) {
					return time.Since(t0), nil
				}
			}
		}
		return 0, errors.New("10 requests in a row unanswered")
	}
}
