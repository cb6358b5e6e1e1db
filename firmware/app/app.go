// Package app holds the services of the tamanic firmware, independent of the
// board so they run, and are tested, on any gVisor stack:
//
//   - TCP 5001: read and discard until EOF, then reply one line
//     "<bytes> <elapsed_ns> <first_byte_to_eof_ns> <idle_ns> <sha256>" and
//     close (the SHA-256 of what was read, "-" when hashing is off; the
//     last one is also kept for /stats);
//   - TCP 5002: read one line holding a decimal N, send N bytes of Pattern
//     as fast as possible, then close once the peer closes;
//   - UDP 7: echo (not to the ports of other datagram services, and
//     rate-limited per peer: echo.go);
//   - TCP 7: echo (RFC 862), bounded in places, time and buffers
//     (echotcp.go);
//   - HTTP 80: GET /stats (JSON), POST /mode?tx=bounce|sg|tso&copybreak=N,
//     POST /gc (a full garbage collection, then the runtime statistics),
//     GET / (a small status page). POST /mode and POST /gc need the header
//     "Authorization: Bearer <token>" with the image's control token; an
//     image built without one refuses them (403);
//   - TCP and UDP 5201: an iperf3 server;
//   - UDP 5003: the small-datagram benchmark's sink and source, closed
//     but for a session the control token opens (POST /pps, pps.go).
//
// Sink, source, HTTP and the TCP echo are bounded (Limits, limits.go): connections per
// service, shared between peers (places.go), an idle timeout, the
// source's request line, and net/http's request timeouts and header size;
// with the TCP buffers and iperf3's bounds they fit a stated memory budget
// (budget.go).
package app

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Ports.
const (
	SinkPort   = 5001
	SourcePort = 5002
	EchoPort   = 7
	HTTPPort   = 80
)

// Pattern is the 64 KiB block the source service repeats: pseudo-random so
// that compression or a stuck byte cannot pass an integrity check.
var Pattern = func() []byte {
	b := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(5002, 5002))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// PatternStream returns the first n bytes the source service sends.
func PatternStream(n int64) io.Reader {
	return io.LimitReader(&repeat{}, n)
}

type repeat struct{ off int }

func (r *repeat) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], Pattern[r.off:])
		n += c
		r.off = (r.off + c) % len(Pattern)
	}
	return n, nil
}

// Controls is what the firmware lets the network change and report.
type Controls interface {
	// SetMode switches TX placement (bounce, sg, tso) and, if copybreak
	// is non-nil, the RX copybreak, without a reboot.
	SetMode(tx string, copybreak *int) error
	// Mode returns the current TX mode and copybreak.
	Mode() (tx string, copybreak int)
	// Stats returns the NIC and endpoint counters, JSON-encodable.
	Stats() any
	// IdleNanoseconds returns the CPU time spent idle since boot.
	IdleNanoseconds() int64
}

// BuildControlToken is the control token an image is built with
// (make firmware CONTROL_TOKEN=..., which links it in with
// -ldflags "-X github.com/tamanic/tamanic/firmware/app.BuildControlToken=...").
// It is only read, as the default of Server.ControlToken.
var BuildControlToken string

// Server runs the services.
type Server struct {
	Stack *stack.Stack
	NIC   tcpip.NICID
	Addr  tcpip.Address
	Ctl   Controls
	Boot  time.Time
	// Net, if set, is reported in /stats under "ipv4" (the address in use
	// and the DHCP lease).
	Net *Network
	// ControlToken authorises POST /mode (header "Authorization: Bearer
	// <token>"). Empty (and BuildControlToken empty): the control port is
	// closed and every POST /mode is refused with 403.
	ControlToken string
	// Limits bound connections, idle time and HTTP clients (limits.go);
	// zero fields take DefaultLimits.
	Limits Limits

	svc services
	// echoNow is the echo limiter's clock (nil: time.Now); tests stop it.
	echoNow func() time.Time

	// noHash makes the sink count bytes without hashing them (POST
	// /mode?hash=0), so that a benchmark measures the network path and not
	// SHA-256, which costs 71 M instructions per MiB on this core (QEMU
	// -icount), six times the network path.
	noHash atomic.Bool

	mu       sync.Mutex
	lastSink struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	}
	sinkPattern SinkPatternStats
	// pps is the small-datagram benchmark's session (pps.go).
	pps ppsService
	// selfTestMu is held while POST /selftest runs one.
	selfTestMu sync.Mutex
}

// Start listens on every port and serves in background goroutines.
func (s *Server) Start() error {
	sink, err := s.listenTCP(SinkPort)
	if err != nil {
		return err
	}
	src, err := s.listenTCPBuf(SourcePort, sourceReceiveBuffer, sourceSendBuffer)
	if err != nil {
		return err
	}
	web, err := s.listenTCP(HTTPPort)
	if err != nil {
		return err
	}
	udp, err := s.listenUDP(EchoPort)
	if err != nil {
		return err
	}
	techo, err := s.listenTCPBuf(EchoPort, echoBufferSize, echoBufferSize)
	if err != nil {
		return err
	}
	if _, err := s.StartIperf3(); err != nil {
		return err
	}
	s.initServices()
	go s.svc.sink.serve(sink, s.serveSink)
	go s.svc.source.serve(src, s.serveSource)
	go s.svc.echo.run(udp, s.Ctl)
	go s.svc.tcpEcho.serve(techo, s.serveTCPEcho)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("POST /mode", s.mode)
	mux.HandleFunc("POST /gc", s.gc)
	mux.HandleFunc("GET /debug/regs", s.debugRegs)
	mux.HandleFunc("POST /selftest", s.selfTest)
	mux.HandleFunc("POST /pps", s.ppsPost)
	mux.HandleFunc("GET /pps", s.ppsGet)
	mux.HandleFunc("GET /{$}", s.index)
	go s.httpServer(mux).Serve(&limitListener{Listener: web, sv: &s.svc.http})
	return nil
}

func (s *Server) serveSink(c net.Conn) {
	defer c.Close()
	start := time.Now()
	idle0 := s.Ctl.IdleNanoseconds()
	h := sha256.New()
	hash := !s.noHash.Load()
	buf := make([]byte, 64<<10)
	var n int64
	var first time.Time
	var pc patternCheck
	for {
		k, err := c.Read(buf)
		if k > 0 {
			if n == 0 {
				first = time.Now()
			}
			n += int64(k)
			if hash {
				h.Write(buf[:k])
				pc.add(buf[:k])
			}
		}
		if err != nil {
			break
		}
	}
	end := time.Now()
	var fte int64
	if n > 0 {
		fte = int64(end.Sub(first))
	}
	sum := "-"
	if hash {
		sum = hex.EncodeToString(h.Sum(nil))
	}
	s.mu.Lock()
	s.lastSink.Bytes, s.lastSink.SHA256 = n, strings.TrimPrefix(sum, "-")
	s.mu.Unlock()
	if hash {
		s.recordPattern(&pc)
	}
	fmt.Fprintf(c, "%d %d %d %d %s\n", n, int64(end.Sub(start)), fte, s.Ctl.IdleNanoseconds()-idle0, sum)
}

// maxSourceLine bounds the source's request line: a decimal int64 is at
// most 19 digits, and a sign, spaces and CR LF fit in the rest. Longer
// lines are refused: the line was read with no bound, and 64 MiB of
// digits without a newline grew the heap by 64 MiB per connection.
const maxSourceLine = 32

// readLine reads one line of at most max bytes (newline included) from
// c, a byte at a time so that nothing past the newline is consumed, by
// deadline when c is an idleConn (reads do not renew it).
func readLine(c net.Conn, max int, deadline time.Time) (string, error) {
	if ic, ok := c.(*idleConn); ok {
		ic.until = deadline
		defer func() { ic.until = time.Time{} }()
	} else {
		c.SetReadDeadline(deadline)
		defer c.SetReadDeadline(time.Time{})
	}
	var buf [64]byte
	line := buf[:0]
	for len(line) < max {
		k, err := c.Read(buf[len(line) : len(line)+1])
		if k == 1 {
			line = buf[:len(line)+1]
			if line[len(line)-1] == '\n' {
				return string(line), nil
			}
		}
		if err != nil {
			return string(line), err
		}
	}
	return string(line), fmt.Errorf("request line longer than %d bytes", max)
}

func (s *Server) serveSource(c net.Conn) {
	defer c.Close()
	line, err := readLine(c, maxSourceLine, time.Now().Add(s.limits().RequestTimeout))
	if err != nil {
		s.svc.source.badRequests.Add(1)
		fmt.Fprintf(c, "bad request: %v\n", err)
		return
	}
	n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil || n < 0 {
		s.svc.source.badRequests.Add(1)
		fmt.Fprintf(c, "bad length %q\n", strings.TrimSpace(line))
		return
	}
	for off := 0; n > 0; {
		k := min(int64(len(Pattern)-off), n)
		w, err := c.Write(Pattern[off : off+int(k)])
		if err != nil {
			return
		}
		n -= int64(w)
		off = (off + w) % len(Pattern)
	}
	// Close once the peer closes.
	io.Copy(io.Discard, c)
}

// Stats is the /stats document.
type Stats struct {
	UptimeNs  int64  `json:"uptime_ns"`
	IdleNs    int64  `json:"idle_ns"`
	TxMode    string `json:"tx_mode"`
	Copybreak int    `json:"copybreak"`
	LastSink  any    `json:"last_sink"`
	// SinkPattern compares what the sink received with the pattern (while
	// it hashes).
	SinkPattern SinkPatternStats `json:"sink_pattern"`
	NIC         any              `json:"nic"`
	IPv4        any              `json:"ipv4,omitempty"`
	// Limits and Runtime are limits.go's: connections per service, the
	// heap and goroutines.
	Limits  LimitStats   `json:"limits"`
	Runtime RuntimeStats `json:"runtime"`
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	tx, cb := s.Ctl.Mode()
	s.mu.Lock()
	last := s.lastSink
	sp := s.sinkPattern
	sp.Recent = append([]PatternDiff(nil), sp.Recent...)
	s.mu.Unlock()
	st := Stats{UptimeNs: int64(time.Since(s.Boot)), IdleNs: s.Ctl.IdleNanoseconds(),
		TxMode: tx, Copybreak: cb, LastSink: last, SinkPattern: sp, NIC: s.Ctl.Stats()}
	if s.Net != nil {
		st.IPv4 = s.Net.Status()
	}
	w.Header().Set("Content-Type", "application/json")
	// The echoes' busy-time histograms only with ?busy=1 and the control
	// token (the request/response benchmark's readings): up to 140 KiB
	// of JSON that anyone could otherwise ask for again and again.
	busy := r.URL.Query().Get("busy") == "1" && s.tokenOK(r)
	st.Limits, st.Runtime = s.limitStats(busy), runtimeStats()
	json.NewEncoder(w).Encode(st)
}

// controlToken is the image's control token ("" when it has none).
func (s *Server) controlToken() string {
	if s.ControlToken != "" {
		return s.ControlToken
	}
	return BuildControlToken
}

// tokenOK reports whether r carries the image's control token (never
// when the image has none), compared in constant time; it answers
// nothing.
func (s *Server) tokenOK(r *http.Request) bool {
	tok := s.controlToken()
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok != "" && ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
}

// authorised checks r's bearer token against the server's control token,
// in constant time, and answers the request itself when it fails: 403 when
// the image has no token (the control port is closed), 401 otherwise.
func (s *Server) authorised(w http.ResponseWriter, r *http.Request) bool {
	if s.controlToken() == "" {
		http.Error(w, "control port closed: this image was built without a control token (make firmware CONTROL_TOKEN=...)", http.StatusForbidden)
		return false
	}
	if !s.tokenOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tamanic"`)
		http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
		return false
	}
	return true
}

// debugRegs answers GET /debug/regs (control token): the registers of
// the interface's device, named as in the manuals, as JSON, or as text
// with ?format=text ("enet ECR 0x024 0xf0000112" a line), as `ethtool -d`
// prints them. It needs the token: reading some registers (MDIO) takes
// the bus, and the dump shows the board's configuration.
func (s *Server) debugRegs(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	d, ok := s.Ctl.(RegisterDumper)
	if !ok {
		http.Error(w, "this interface has no register dump", http.StatusNotImplemented)
		return
	}
	groups := d.Registers()
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, g := range groups {
			if g.Error != "" {
				fmt.Fprintf(w, "%s error %q\n", g.Block, g.Error)
			}
			for _, x := range g.Regs {
				fmt.Fprintf(w, "%s %-8s 0x%03x 0x%08x\n", g.Block, x.Name, x.Offset, x.Value)
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(groups)
}

// selfTest answers POST /selftest (control token): the interface's
// loopback self-test, run now, and its report as JSON (the same as /stats
// "nic.selftest"). It takes the interface offline for the test (a few
// hundred milliseconds, plus a link renegotiation when it loops at the
// PHY), so it needs the token; one runs at a time (409 while one does).
func (s *Server) selfTest(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	st, ok := s.Ctl.(SelfTester)
	if !ok {
		http.Error(w, "this interface has no run-time self-test", http.StatusNotImplemented)
		return
	}
	if !s.selfTestMu.TryLock() {
		http.Error(w, "a self-test is running", http.StatusConflict)
		return
	}
	defer s.selfTestMu.Unlock()
	rep, err := st.SelfTest()
	if err != nil {
		http.Error(w, fmt.Sprintf("self-test: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// gc runs full garbage collections and answers the runtime statistics
// after it (the /stats "runtime" member): heap_alloc is then the live
// heap, which a soak compares across load rounds to tell a leak from the
// runtime keeping spans it has not needed to give back (heap_inuse). It
// needs the control token: a collection stops the world, and anyone who
// could trigger them at will could take the CPU.
func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	// Twice: objects in sync.Pool caches (gVisor's buffers among them)
	// survive one collection in the pools' victim caches.
	runtime.GC()
	runtime.GC()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(runtimeStats())
}

func (s *Server) mode(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	tx := r.URL.Query().Get("tx")
	var cb *int
	if v := r.URL.Query().Get("copybreak"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			http.Error(w, "copybreak: "+err.Error(), http.StatusBadRequest)
			return
		}
		cb = &n
	}
	switch r.URL.Query().Get("hash") {
	case "0":
		s.noHash.Store(true)
	case "1":
		s.noHash.Store(false)
	case "":
	default:
		http.Error(w, "hash: want 0 or 1", http.StatusBadRequest)
		return
	}
	if tx == "" {
		tx, _ = s.Ctl.Mode()
	}
	if err := s.Ctl.SetMode(tx, cb); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tx, c := s.Ctl.Mode()
	fmt.Fprintf(w, "tx=%s copybreak=%d hash=%v\n", tx, c, !s.noHash.Load())
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	tx, cb := s.Ctl.Mode()
	up := time.Since(s.Boot)
	idle := time.Duration(s.Ctl.IdleNanoseconds())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>tamanic</title><h1>tamanic</h1><p>up %v, idle %.1f%%</p><p>TX mode <b>%s</b>, RX copybreak <b>%d</b></p><p><a href=\"/stats\">/stats</a> &middot; <code>POST /mode?tx=bounce|sg|tso&amp;copybreak=N&amp;hash=0|1</code></p>\n",
		up.Round(time.Second), 100*float64(idle)/float64(max(up, 1)), tx, cb)
}
