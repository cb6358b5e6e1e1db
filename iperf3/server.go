// Package iperf3 is an iperf3 server that the stock iperf3 client (3.9 and
// later) can test against: TCP and UDP, forward, reverse (-R) and
// bidirectional (--bidir), parallel streams (-P), time, byte and block
// limits (-t, -n, -k), omitted seconds (-O), UDP bit rates (-b) with loss and
// jitter counted from the client's packet headers (32- or 64-bit counters),
// and the server's CPU utilisation from a pluggable CPUSource.
//
// It runs over any net.Listener for TCP and net.PacketConn for UDP, bound to
// the same port (5201 by convention): the host's sockets in tests, gVisor's
// gonet.TCPListener and gonet.UDPConn in the firmware.
//
// The protocol, as the reference implementation (esnet/iperf) speaks it:
// the client opens the control connection and sends a 37-byte cookie; the
// server drives the test by writing one signed state byte at a time
// (PARAM_EXCHANGE, CREATE_STREAMS, TEST_START, TEST_RUNNING,
// EXCHANGE_RESULTS, DISPLAY_RESULTS) and the client answers with its own
// (TEST_END, IPERF_DONE, CLIENT_TERMINATE). Parameters and results travel
// as JSON objects behind a 32-bit big-endian length. Each TCP stream is a
// new connection to the same port that starts with the same cookie; each
// UDP stream announces itself with a 4-byte datagram to the same port and
// is answered with 4 bytes.
//
// One test runs at a time, as with the reference server: another client
// gets ACCESS_DENIED. Hostile or broken input (malformed cookies, garbage or
// oversized JSON, unknown states, clients that vanish, streams that never
// connect) ends that test with a counted, logged reason and, where the
// client can still hear it, SERVER_ERROR; every wait is bounded and the
// server keeps serving.
package iperf3

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Server. Zero values select the defaults noted.
type Config struct {
	// CPU is sampled at the start and end of each test; DefaultCPU() if nil.
	CPU CPUSource
	// MaxStreams bounds the data streams a test holds: -P, or twice -P
	// with --bidir, which opens -P streams in each direction (default
	// 128, the reference client's limit for -P). Each stream is a
	// connection, a goroutine and its buffers, so this is the number of
	// places a memory budget counts for a test's streams; a test asking
	// for more is refused with IENUMSTREAMS (BadParams).
	MaxStreams int
	// HandshakeTimeout bounds every control-connection exchange: the
	// cookie, the parameters, the results, each state byte written
	// (default 10 s).
	HandshakeTimeout time.Duration
	// StreamTimeout bounds the wait for all streams after CREATE_STREAMS
	// (default 10 s).
	StreamTimeout time.Duration
	// IdleTimeout ends a running test in which no byte moved on any stream
	// for this long (default 30 s).
	IdleTimeout time.Duration
	// Grace ends a test that runs this much longer than -O plus -t (or,
	// without -t, than MaxDuration) without the client's TEST_END
	// (default 10 s).
	Grace time.Duration
	// MaxDuration is the longest test (default 1 h): -O plus -t longer
	// than this is refused with IEDURATION (BadParams), and every test,
	// whatever bounds it (-t, -n, -k), is ended (Timeouts) if the
	// client's TEST_END has not come MaxDuration plus Grace after
	// TEST_START; no byte that arrives renews it. One test runs at a
	// time, so this is the longest one client keeps every other waiting:
	// a -n or -k test has no -t to end it, and a client trickling its
	// bytes inside IdleTimeout otherwise held the server for as long as it
	// liked. An hour is far longer than the project's measurements
	// (seconds) and than the reference client's own limit for -O (600 s).
	MaxDuration time.Duration
	// MaxPending bounds the connections waiting to send their cookie;
	// further ones are closed at once (default 32).
	MaxPending int
	// MaxWaiters bounds the connections with a valid cookie that wait for
	// a test past its results to end (a client that starts as soon as the
	// previous one has its results); further ones are denied at once
	// (default 2: the next client and one spare). Each waiter holds a
	// goroutine and its connection's buffers for up to HandshakeTimeout,
	// and without the bound a flood of valid cookies parked thousands.
	MaxWaiters int
	// Logf, if set, receives one line per refused connection or ended test.
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.CPU == nil {
		c.CPU = DefaultCPU()
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 128
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.StreamTimeout <= 0 {
		c.StreamTimeout = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = time.Hour
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 32
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = 2
	}
}

// Stats counts what the server has seen since it was created.
type Stats struct {
	Tests            uint64 // control connections that became a test
	Completed        uint64 // tests that reached DISPLAY_RESULTS
	Aborted          uint64 // tests ended early, for any of the reasons below
	ClientGone       uint64 // ... the control connection closed or failed
	ClientTerminated uint64 // ... the client sent CLIENT_TERMINATE
	Timeouts         uint64 // ... streams never came, nothing moved, or the test overran
	BadParams        uint64 // ... parameters refused (garbage, oversized, out of range)
	BadResults       uint64 // ... the client's results were refused
	BadMessages      uint64 // ... an unknown state byte arrived
	ServerClosed     uint64 // ... the server was closed
	Denied           uint64 // connections answered ACCESS_DENIED: busy, or a stream with the wrong cookie
	BadCookie        uint64 // connections whose cookie was malformed or did not arrive in time
	Overloaded       uint64 // connections closed unread: MaxPending were waiting and their peer held the most, or their peer held its share
	Evicted          uint64 // connections waiting for their cookie closed to make room for a peer holding fewer
	StrayDatagrams   uint64 // UDP datagrams that belong to no stream of the running test
	ShortDatagrams   uint64 // UDP datagrams too short for the iperf3 header
	UDPSendErrors    uint64 // UDP datagrams the server failed to send
	LastError        string // the most recent reason a connection or test was refused or ended early
	Last             *Result
}

// Result summarises the server's side of one test.
type Result struct {
	Protocol      string // "tcp" or "udp"
	Reverse       bool
	Bidir         bool
	Streams       int
	Elapsed       time.Duration // TEST_START (or the end of -O) to TEST_END
	BytesReceived uint64        // counted on the server's receiving streams
	BytesSent     uint64        // written on the server's sending streams
	Packets       uint64        // UDP: highest sequence number, summed over receiving streams
	Lost          uint64        // UDP: gaps in the sequence numbers, net of late arrivals
	OutOfOrder    uint64        // UDP: datagrams at or below the highest sequence seen
	Jitter        float64       // UDP: mean of the receiving streams' jitter, seconds
	PacketsSent   uint64        // UDP: datagrams the server sent
	CPUTotal      float64       // percent, as reported to the client
	CPUUser       float64
	CPUSystem     float64
	ClientBytes   uint64 // sum of the client's per-stream byte counts
	ClientVersion string
	Err           string // why the test ended early; empty if it completed
}

// Server serves iperf3 tests, one at a time.
type Server struct {
	cfg Config
	tcp net.Listener
	udp net.PacketConn

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	live      atomic.Int64
	waiters   atomic.Int64

	mu     sync.Mutex
	active *test
	shakes map[net.Conn]*shake // connections still reading their cookie (MaxPending)
	byPeer map[netip.Addr]int  // shakes per peer
	stats  Stats
}

// NewServer returns a server for the TCP listener and, if udp is non-nil,
// the UDP socket bound to the same port. Call Serve to run it.
func NewServer(tcp net.Listener, udp net.PacketConn, cfg Config) *Server {
	cfg.defaults()
	return &Server{cfg: cfg, tcp: tcp, udp: udp, closed: make(chan struct{}),
		shakes: make(map[net.Conn]*shake), byPeer: make(map[netip.Addr]int)}
}

// Serve accepts connections until the listener fails or Close is called;
// it returns nil after Close.
func (s *Server) Serve() error {
	if s.udp != nil && !s.spawn(s.readUDP) {
		return nil
	}
	var order uint64 // connections accepted, to number streams in order
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("iperf3: accept: %w", err)
		}
		if !s.admit(c) {
			c.Close()
			continue
		}
		order++
		n := order
		if !s.spawn(func() { s.handle(c, n) }) {
			s.release(c)
			c.Close()
		}
	}
}

// Close stops the server: it closes the sockets, ends a running test
// (telling the client SERVER_TERMINATE) and waits for every goroutine the
// server started.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.closed)
		for c := range s.shakes {
			c.Close()
		}
		if s.active != nil {
			// Unblock a handshake read; the test then sees s.closed.
			s.active.ctrl.SetReadDeadline(time.Now())
		}
		s.mu.Unlock()
		err = s.tcp.Close()
		if s.udp != nil {
			if e := s.udp.Close(); err == nil {
				err = e
			}
		}
	})
	s.wg.Wait()
	return err
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if st.Last != nil {
		r := *st.Last
		st.Last = &r
	}
	return st
}

// Goroutines returns how many goroutines the server has running: one
// reading UDP when idle, plus those of connections and of a test.
func (s *Server) Goroutines() int { return int(s.live.Load()) }

// Busy reports whether a test is in progress.
func (s *Server) Busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active != nil
}

// spawn runs f in a goroutine the server waits for on Close; it returns
// false, without running f, once the server is closed.
func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return false
	default:
	}
	s.wg.Add(1)
	s.live.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.live.Add(-1)
		f()
	}()
	return true
}

func (s *Server) logf(format string, a ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, a...)
	}
}

// refuse counts one refusal under s.mu and records its reason.
func (s *Server) refuse(counter *uint64, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.mu.Lock()
	*counter++
	s.stats.LastError = msg
	s.mu.Unlock()
	s.logf("iperf3: %s", msg)
}

// deny answers ACCESS_DENIED and closes c.
func (s *Server) deny(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	c.Write([]byte{stateByte(stateAccessDenied)})
	c.Close()
}

// handle reads a new connection's cookie and makes it a stream of the
// running test, refuses it, or runs a new test on it.
func (s *Server) handle(c net.Conn, order uint64) {
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		s.release(c)
		c.Close()
		return
	default:
	}
	s.mu.Unlock()
	c.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	var ck [CookieSize]byte
	_, err := io.ReadFull(c, ck[:])
	s.release(c)
	if err != nil {
		s.refuse(&s.stats.BadCookie, "cookie from %v: %v", c.RemoteAddr(), err)
		c.Close()
		return
	}
	if !validCookie(ck[:]) {
		s.refuse(&s.stats.BadCookie, "cookie from %v: not 36 printable characters and a NUL: %q", c.RemoteAddr(), ck[:])
		s.deny(c)
		return
	}
	waited := false
	for {
		s.mu.Lock()
		t := s.active
		if t == nil {
			break // with s.mu held
		}
		if t.cookie == ck && t.addTCPStream(c, order) {
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		// A client that starts as soon as the previous one has its
		// results waits for that test's last byte instead of being
		// refused.
		why := "a test is running"
		select {
		case <-t.wrapping:
			if waited {
				break
			}
			waited = true
			if s.waiters.Add(1) > int64(s.cfg.MaxWaiters) {
				s.waiters.Add(-1)
				why = fmt.Sprintf("a test is ending and %d connections already wait for it", s.cfg.MaxWaiters)
				break
			}
			tm := time.NewTimer(s.cfg.HandshakeTimeout)
			select {
			case <-t.over:
				tm.Stop()
				s.waiters.Add(-1)
				continue
			case <-tm.C:
			case <-s.closed:
				tm.Stop()
			}
			s.waiters.Add(-1)
		default:
		}
		s.refuse(&s.stats.Denied, "connection from %v denied: %s", c.RemoteAddr(), why)
		s.deny(c)
		return
	}
	select {
	case <-s.closed:
		s.mu.Unlock()
		c.Close()
		return
	default:
	}
	t := newTest(s, c, ck)
	s.active = t
	s.stats.Tests++
	s.mu.Unlock()

	res, counter, msg := t.run()

	s.mu.Lock()
	s.active = nil
	close(t.over)
	if res != nil {
		s.stats.Last = res
	}
	if counter != nil {
		s.stats.Aborted++
		*counter++
		s.stats.LastError = msg
	} else {
		s.stats.Completed++
	}
	s.mu.Unlock()
}

// readUDP receives every datagram on the UDP port and hands it to the
// running test's stream for its source address.
func (s *Server) readUDP() {
	buf := make([]byte, 64<<10)
	var order uint64 // datagrams read, to number streams in order
	for {
		n, addr, err := s.udp.ReadFrom(buf)
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.logf("iperf3: UDP receive: %v", err)
			time.Sleep(10 * time.Millisecond) // do not spin on a persistent error
			continue
		}
		order++
		s.datagram(buf[:n], addr, time.Now(), order)
	}
}

// datagram dispatches one UDP datagram.
func (s *Server) datagram(b []byte, from net.Addr, now time.Time, order uint64) {
	key := from.String()
	s.mu.Lock()
	t := s.active
	if t == nil || !t.p.UDP || t.phase < phaseCreate {
		s.stats.StrayDatagrams++
		s.mu.Unlock()
		return
	}
	st := t.udpPeers[key]
	if st == nil {
		if len(b) == 4 && t.phase == phaseCreate && sameHost(from, t.ctrl.RemoteAddr()) {
			var last bool
			if st, last = t.addStreamLocked(order); st != nil {
				st.peer = from
				t.udpPeers[key] = st
				s.mu.Unlock()
				// The reply goes out before the test may start (t.ready):
				// the stock client takes the first datagram a receiving
				// stream gets as the reply and fails on test data (3.12,
				// iperf_udp_connect, outside -R).
				if _, err := s.udp.WriteTo(udpConnectReply, from); err != nil {
					s.logf("iperf3: UDP connect reply to %v: %v", from, err)
				}
				if last {
					close(t.ready)
				}
				return
			}
		}
		s.stats.StrayDatagrams++
		s.mu.Unlock()
		return
	}
	counting := t.phase == phaseRunning && !st.sender
	if counting && len(b) < udpHeaderLen(t.p.Counters64) {
		s.stats.ShortDatagrams++
	}
	s.mu.Unlock()
	if !counting {
		return
	}
	st.bytes.Add(uint64(len(b)))
	h, ok := decodeUDPHeader(b, t.p.Counters64)
	st.mu.Lock()
	if ok {
		st.udp.add(h, now)
	} else {
		st.udp.short++
	}
	st.mu.Unlock()
}

// sameHost reports whether two addresses share an IP; it is true when
// either is not an IP address, so unusual transports are not locked out.
func sameHost(a, b net.Addr) bool {
	ip := func(x net.Addr) net.IP {
		switch v := x.(type) {
		case *net.UDPAddr:
			return v.IP
		case *net.TCPAddr:
			return v.IP
		}
		return nil
	}
	ia, ib := ip(a), ip(b)
	if ia == nil || ib == nil {
		return true
	}
	return ia.Equal(ib)
}
