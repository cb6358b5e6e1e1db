package app

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what clients can hold on the board: connections per
// service, how long a connection may sit without moving a byte, and how
// long an HTTP client may take over a request. The zero value of each
// field means its default (DefaultLimits).
type Limits struct {
	// MaxConns bounds the concurrent connections of each TCP service
	// (sink, source). A connection past it is accepted and closed at once
	// and counted as refused.
	MaxConns int
	// IdleTimeout closes a sink or source connection that neither reads
	// nor writes a byte for this long.
	IdleTimeout time.Duration
	// RequestTimeout bounds the whole of the source's request line, from
	// the connection's start: unlike IdleTimeout, reads do not renew it,
	// so a peer trickling a byte a second cannot hold the place.
	RequestTimeout time.Duration
	// HTTPMaxConns bounds the concurrent HTTP connections.
	HTTPMaxConns int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout, HTTPIdleTimeout and
	// MaxHeaderBytes are net/http.Server's, for port 80.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	HTTPIdleTimeout   time.Duration
	MaxHeaderBytes    int
	// EchoRate and EchoBurst bound what the UDP echo answers to one
	// peer (source address), in full-size frames (a datagram costs one
	// per 1480 bytes, echoFrames): EchoRate a second, EchoBurst at once.
	// A datagram costing more than EchoBurst is never answered; the
	// largest costs 45.
	EchoRate  int
	EchoBurst int
	// EchoMaxConns bounds the TCP echo's concurrent connections (echotcp.go),
	// and EchoLifetime how long one may last, however it moves bytes
	// (IdleTimeout closes it sooner if it moves none).
	EchoMaxConns int
	EchoLifetime time.Duration
	// IperfMaxStreams, IperfMaxPending and IperfMaxWaiters are the iperf3
	// server's MaxStreams, MaxPending and MaxWaiters (iperf3.Config).
	IperfMaxStreams, IperfMaxPending, IperfMaxWaiters int
	// Linger bounds how long a closed connection may take to deliver
	// what it queued before it is reset; it keeps its place meanwhile
	// (closer.go). MaxOrphans bounds the closed connections without a
	// place (iperf3's) that linger at once, MaxTimeWait the endpoints in
	// FIN-WAIT-2 or TIME-WAIT.
	Linger                  time.Duration
	MaxOrphans, MaxTimeWait int
}

// DefaultLimits are the limits of a Server whose Limits are zero. 64
// connections per service leave room for the soak's load (make soak: 32
// each way, from one address) and, with every other place, fit the
// memory budget (budget.go: TestDefaultLimitsFitTheBudget).
var DefaultLimits = Limits{
	MaxConns:          64,
	IdleTimeout:       60 * time.Second,
	RequestTimeout:    10 * time.Second,
	HTTPMaxConns:      16,
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       10 * time.Second,
	WriteTimeout:      30 * time.Second,
	HTTPIdleTimeout:   30 * time.Second,
	MaxHeaderBytes:    8 << 10,
	// The soak's echo client sends a datagram every round trip plus 2
	// ms (under 500 small datagrams a second); 1000 frames a second is
	// twice that, and caps what one peer (or one spoofed source) can
	// make the board reflect at 1.5 MB/s, whatever the datagrams' size.
	EchoRate:  1000,
	EchoBurst: 100,
	// 4 request/response clients at once (a benchmark keeps one): 100 KiB
	// each in the budget (budget.go), which two interfaces' halves of the
	// other services leave little room for; 10 minutes is far longer
	// than a benchmark's run and bounds a trickle's hold on a place.
	EchoMaxConns: 4,
	EchoLifetime: 10 * time.Minute,
	// 32 streams (the reference client allows -P 128) and 8 connections
	// waiting for their cookie keep iperf3's share of the memory budget
	// (budget.go) at 35 MiB; 2 waiters are the next client and a spare.
	IperfMaxStreams: 32,
	IperfMaxPending: 8,
	IperfMaxWaiters: 2,
	// 10 s delivers the source's 1 MiB send buffer at 1 Mbit/s.
	Linger: 10 * time.Second,
	// iperf3 closes its streams when a test ends: 16 may still be
	// delivering (each holds at most its 128 KiB send buffer).
	MaxOrphans: 16,
	// 512 endpoints in TIME-WAIT (timeWaitSize each, budget.go) are what
	// a peer closing 8.5 connections a second leaves for gVisor's 60 s.
	MaxTimeWait: 512,
}

// withDefaults fills l's zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pickD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&l.MaxConns, d.MaxConns)
	pick(&l.HTTPMaxConns, d.HTTPMaxConns)
	pick(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	pick(&l.EchoRate, d.EchoRate)
	pick(&l.EchoBurst, d.EchoBurst)
	pick(&l.EchoMaxConns, d.EchoMaxConns)
	pickD(&l.EchoLifetime, d.EchoLifetime)
	pick(&l.IperfMaxStreams, d.IperfMaxStreams)
	pick(&l.IperfMaxPending, d.IperfMaxPending)
	pick(&l.IperfMaxWaiters, d.IperfMaxWaiters)
	pickD(&l.IdleTimeout, d.IdleTimeout)
	pickD(&l.RequestTimeout, d.RequestTimeout)
	pickD(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pickD(&l.ReadTimeout, d.ReadTimeout)
	pickD(&l.WriteTimeout, d.WriteTimeout)
	pickD(&l.HTTPIdleTimeout, d.HTTPIdleTimeout)
	pickD(&l.Linger, d.Linger)
	pick(&l.MaxOrphans, d.MaxOrphans)
	pick(&l.MaxTimeWait, d.MaxTimeWait)
	return l
}

// service counts one TCP service's connections and enforces its bound,
// its per-peer share and its idle timeout (places.go).
type service struct {
	max  int
	idle time.Duration // 0: no idle timeout (HTTP has its own)

	mu     sync.Mutex
	places map[*place]struct{}
	byPeer map[netip.Addr]int

	active, accepted, refused, idleClosed, badRequests atomic.Int64
	refusedPeer, evicted, expired                      atomic.Int64
}

// ServiceStats is one service's member of /stats "limits".
type ServiceStats struct {
	Max int `json:"max"`
	// PeerMax is the most places one peer (source address) may hold.
	PeerMax int `json:"peer_max"`
	// Active connections now; Accepted since boot, including the Refused
	// ones (closed at once: over Max from the peer holding the most, or
	// over PeerMax, counted in RefusedPeer too); Evicted were closed to
	// make room for a peer holding fewer; IdleClosed closed by the idle
	// timeout.
	Active      int64 `json:"active"`
	Accepted    int64 `json:"accepted"`
	Refused     int64 `json:"refused"`
	RefusedPeer int64 `json:"refused_peer"`
	Evicted     int64 `json:"evicted"`
	IdleClosed  int64 `json:"idle_closed"`
	// Expired were closed at the end of their lifetime (the TCP echo's
	// Limits.EchoLifetime).
	Expired int64 `json:"expired,omitempty"`
	// BadRequests were refused for what the peer sent (the source's
	// line: too long, too slow, not a length).
	BadRequests int64 `json:"bad_requests"`
}

func (sv *service) stats() ServiceStats {
	return ServiceStats{Max: sv.max, PeerMax: sv.peerMax(), Active: sv.active.Load(), Accepted: sv.accepted.Load(),
		Refused: sv.refused.Load(), RefusedPeer: sv.refusedPeer.Load(), Evicted: sv.evicted.Load(),
		IdleClosed: sv.idleClosed.Load(), Expired: sv.expired.Load(), BadRequests: sv.badRequests.Load()}
}

// serve accepts on l until it fails, running handle for each connection
// within the bounds; handle must close its connection.
func (sv *service) serve(l net.Listener, handle func(net.Conn)) {
	for {
		c, pl, err := sv.accept(l)
		if err != nil {
			return
		}
		if c == nil {
			continue
		}
		go func() {
			handle(c)
			c.Close()
			if !releasedByConn(c) {
				sv.release(pl)
			}
		}()
	}
}

// accept returns the next connection within the bounds and its place,
// nil for one refused, or l's error.
func (sv *service) accept(l net.Listener) (net.Conn, *place, error) {
	c, err := l.Accept()
	if err != nil {
		return nil, nil, err
	}
	sv.accepted.Add(1)
	pl := sv.take(c)
	if pl == nil {
		sv.refused.Add(1)
		// Closed, not reset: a refused client reads EOF. It holds no
		// place, so it lingers as an orphan (closer.go).
		c.Close()
		return nil, nil, nil
	}
	if tc, ok := c.(*tcpConn); ok {
		// The place is given back once the connection has delivered
		// what it queued (closer.go), not when its handler returns.
		tc.setRelease(func() { sv.release(pl) })
	}
	if sv.idle > 0 {
		c = &idleConn{Conn: c, sv: sv}
	}
	return c, pl, nil
}

// idleConn renews its deadline before every read and write, so a peer
// that stops moving bytes for sv.idle loses the connection; a read never
// waits past until, when it is set (a request's own deadline).
type idleConn struct {
	net.Conn
	sv    *service
	until time.Time
}

func (c *idleConn) Read(b []byte) (int, error) {
	d, idle := time.Now().Add(c.sv.idle), true
	if !c.until.IsZero() && c.until.Before(d) {
		d, idle = c.until, false
	}
	if err := c.Conn.SetReadDeadline(d); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if idle {
		c.count(err)
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.sv.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	c.count(err)
	return n, err
}

func (c *idleConn) count(err error) {
	if err == nil {
		return
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		c.sv.idleClosed.Add(1)
		giveUp(c.Conn)
	}
}

// limitListener is a net.Listener within a service's bounds, for
// http.Server.
type limitListener struct {
	net.Listener
	sv *service
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, pl, err := l.sv.accept(l.Listener)
		if err != nil {
			return nil, err
		}
		if c != nil {
			return &countedConn{Conn: c, sv: l.sv, pl: pl}, nil
		}
	}
}

// countedConn gives its place back to the service on Close.
type countedConn struct {
	net.Conn
	sv *service
	pl *place
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	if !releasedByConn(c.Conn) {
		c.sv.release(c.pl)
	}
	return err
}

// releasedByConn reports whether c gives its place back itself (a
// *tcpConn, once delivered), possibly under an idleConn.
func releasedByConn(c net.Conn) bool {
	if ic, ok := c.(*idleConn); ok {
		c = ic.Conn
	}
	_, ok := c.(*tcpConn)
	return ok
}

// services are the Server's bounded services.
type services struct {
	sink, source, http service
	echo               *echoService
	// tcpEcho is the TCP echo's places (echotcp.go); tcpEchoBusy its busy
	// time per answer.
	tcpEcho     service
	tcpEchoBusy busyHist
	reapOnce    sync.Once
	reap        *reaper
}

func (s *Server) limits() Limits { return s.Limits.withDefaults() }

// initServices sets the services' bounds from the server's limits.
func (s *Server) initServices() {
	l := s.limits()
	s.svc.sink.max, s.svc.sink.idle = l.MaxConns, l.IdleTimeout
	s.svc.source.max, s.svc.source.idle = l.MaxConns, l.IdleTimeout
	s.svc.http.max = l.HTTPMaxConns
	// The TCP echo keeps its own deadlines (idle and lifetime).
	s.svc.tcpEcho.max = l.EchoMaxConns
	s.svc.echo = newEchoService(l.EchoRate, l.EchoBurst, s.echoNow)
}

// httpServer is port 80's server, with the limits' timeouts.
func (s *Server) httpServer(h http.Handler) *http.Server {
	l := s.limits()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.HTTPIdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// LimitStats is the /stats "limits" member.
type LimitStats struct {
	Sink   ServiceStats `json:"sink"`
	Source ServiceStats `json:"source"`
	HTTP   ServiceStats `json:"http"`
	Echo   EchoStats    `json:"echo"`
	// TCPEcho is the TCP echo's places; TCPEchoBusy its busy time per
	// answer (busyhist.go).
	TCPEcho     ServiceStats  `json:"tcp_echo"`
	TCPEchoBusy BusyHistStats `json:"tcp_echo_busy"`
	// Closing is what closed connections hold (closer.go).
	Closing CloseStats `json:"closing"`
}

// limitStats returns the services' limits and counters; busy adds the
// echoes' busy-time histogram counts (GET /stats?busy=1 with the control
// token).
func (s *Server) limitStats(busy bool) LimitStats {
	return LimitStats{Sink: s.svc.sink.stats(), Source: s.svc.source.stats(), HTTP: s.svc.http.stats(),
		Echo: s.svc.echo.stats(busy), TCPEcho: s.svc.tcpEcho.stats(), TCPEchoBusy: s.svc.tcpEchoBusy.stats(busy), Closing: s.closeStats()}
}

// closeStats returns the reaper's counters.
func (s *Server) closeStats() CloseStats { return s.svc.reap.stats() }

// reaper returns the server's reaper, started on first use.
func (s *Server) reaper() *reaper {
	s.svc.reapOnce.Do(func() { s.svc.reap = newReaper(s.limits()) })
	return s.svc.reap
}

// RuntimeStats is the /stats "runtime" member: the firmware's heap and
// goroutines, for the soak (make soak) to watch for growth.
type RuntimeStats struct {
	Goroutines   int    `json:"goroutines"`
	HeapAlloc    uint64 `json:"heap_alloc"`
	HeapInuse    uint64 `json:"heap_inuse"`
	HeapSys      uint64 `json:"heap_sys"`
	HeapObjects  uint64 `json:"heap_objects"`
	StackInuse   uint64 `json:"stack_inuse"`
	Sys          uint64 `json:"sys"`
	TotalAlloc   uint64 `json:"total_alloc"`
	Mallocs      uint64 `json:"mallocs"`
	Frees        uint64 `json:"frees"`
	NumGC        uint32 `json:"num_gc"`
	PauseTotalNs uint64 `json:"pause_total_ns"`
}

func runtimeStats() RuntimeStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return RuntimeStats{Goroutines: runtime.NumGoroutine(), HeapAlloc: m.HeapAlloc, HeapInuse: m.HeapInuse,
		HeapSys: m.HeapSys, HeapObjects: m.HeapObjects, StackInuse: m.StackInuse, Sys: m.Sys,
		TotalAlloc: m.TotalAlloc, Mallocs: m.Mallocs, Frees: m.Frees, NumGC: m.NumGC, PauseTotalNs: m.PauseTotalNs}
}

// Backlog is the listen backlog of the TCP services: room for a burst of
// connections as large as a service's bound (gonet.ListenTCP's is 10,
// and a SYN past a full backlog is dropped, which QEMU's user network
// turns into a reset of the host's connection).
const Backlog = 128
