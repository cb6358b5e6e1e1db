package app

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// The small-datagram benchmark (issue 33 item 1, qemu/cmd/tamanic-pps):
// a UDP sink that counts numbered datagrams and a UDP source that sends
// them at a set rate, on PPSPort. The port is closed except during a
// session, which only the control token opens (POST /pps), for one
// session at a time, of a bounded length, with one peer: the address the
// POST came from, at the port it names. Nothing the service receives is
// ever answered, so a hostile peer gains no reflector; without the token
// it cannot open the port at all.
//
// What a session holds: one UDP endpoint (its receive buffer the stack's
// UDP default, as the echo's), the sink's 2 KiB buffer and its bitmap of
// sequence numbers seen (count bits: 128 KiB at PPSMaxCount) or the
// source's one datagram, and two goroutines at most; one session at a time, at
// most PPSMaxTime long (a source whose write waits on a link that gives
// no packets back runs on until a stop or the next POST /pps, which ends
// a session past its deadline). A spoofer who guesses the peer's address, port
// and id can add to the counters of a running session (within count), no
// more: it is a benchmark's instrument, opened by the holder of the
// control token.
//
// Every datagram carries, big-endian, the session's 64-bit id in bytes 0
// to 7 and its sequence number (0, 1, 2 ...) in bytes 8 to 15; the rest
// is padding. The sink's loss is counted from the sequence numbers (gaps
// skipped over, the tail never reached), not assumed from counts.
//
//	POST /pps?op=rx&port=P&id=X&count=N&secs=S   sink: count datagrams id X,
//	    sequence 0..N-1, from the caller's address and port P, for S seconds
//	POST /pps?op=tx&port=P&id=X&count=N&size=B&rate=R&delay_ms=D
//	    source: after D ms, send N datagrams of B bytes to the caller's
//	    address, port P, R a second
//	POST /pps?op=stop                            end the session now
//	GET  /pps                                    the session's counters

// PPSPort is the small-datagram benchmark's UDP port (closed outside a
// session).
const PPSPort = 5003

// Bounds of a session (every number in a POST /pps is checked against
// them in the unit it arrives in, before any arithmetic).
const (
	// PPSHeader is the id and sequence number every datagram carries:
	// the smallest datagram the service sends or counts.
	PPSHeader = 16
	// PPSMaxSize is the largest datagram the source sends: a 1500-byte
	// MTU less 20 bytes of IPv4 and 8 of UDP header.
	PPSMaxSize = 1472
	// PPSMaxCount bounds a session's datagrams.
	PPSMaxCount = 1 << 20
	// PPSMaxRate bounds the source's rate (datagrams a second): the
	// floor on its interval is a microsecond.
	PPSMaxRate = 1_000_000
	// PPSMaxTime bounds a session's length (a source's count/rate, a
	// sink's secs) and ppsMaxDelay a source's start delay.
	PPSMaxTime  = 60 * time.Second
	ppsMaxDelay = time.Second
	// ppsStopCheck is the longest the source sleeps before it looks for
	// a stop.
	ppsStopCheck = 100 * time.Millisecond
	// ppsBufSize is the one receive buffer a sink holds: a datagram
	// longer than a full frame's is read truncated (and counted).
	ppsBufSize = 2048
)

// PPSStats is GET /pps: the current or last session.
type PPSStats struct {
	Op     string `json:"op"` // rx, tx, or "" before the first session
	ID     uint64 `json:"id"`
	Active bool   `json:"active"`
	Peer   string `json:"peer"`
	Count  int64  `json:"count"`
	Size   int    `json:"size,omitempty"`
	Rate   int    `json:"rate,omitempty"`
	// Sink: Received, the distinct sequence numbers of the session
	// counted (each below Count, each once); Duplicates, datagrams whose
	// sequence was counted before (not in Received, never hiding a
	// loss); Gaps, sequence numbers skipped over by a jump forward; Late,
	// distinct datagrams whose sequence was below the next expected
	// (reordered); Next, the next sequence expected; Lost, Count less
	// Received (the sequence numbers never seen: a running session's tail
	// included); Refused, datagrams not of the session (another address
	// or port, another id, a sequence out of range, shorter than
	// PPSHeader).
	Received   int64  `json:"received"`
	Gaps       int64  `json:"gaps"`
	Late       int64  `json:"late"`
	Next       uint64 `json:"next"`
	Lost       int64  `json:"lost"`
	Refused    int64  `json:"refused"`
	Duplicates int64  `json:"duplicates"`
	// Source: datagrams handed to the stack and refused by it.
	Sent       int64 `json:"sent"`
	SendErrors int64 `json:"send_errors"`
	// StartNs is the session's start, in the uptime_ns of /stats;
	// FirstNs and LastNs are the first and last datagram's time (sent or
	// counted) from the session's start.
	StartNs int64 `json:"start_ns"`
	FirstNs int64 `json:"first_ns"`
	LastNs  int64 `json:"last_ns"`
}

// ppsService holds the current or last session; mu guards cur, the
// counters are atomics the session's goroutine updates.
type ppsService struct {
	mu  sync.Mutex
	cur *ppsSession
}

type ppsSession struct {
	op         string
	id         uint64
	peer       netip.AddrPort
	count      int64
	size, rate int
	start      time.Time
	// deadline is when the session is over whatever its goroutine
	// does: a session still active past it is ended by the next POST.
	deadline   time.Time
	startNs    int64
	active     atomic.Bool
	received   atomic.Int64
	gaps, late atomic.Int64
	next       atomic.Uint64
	dups       atomic.Int64
	// seen has a bit per sequence number of a sink session (count bits,
	// 128 KiB at PPSMaxCount; nil for a source), read and written by
	// the sink's goroutine only.
	seen        []uint64
	refused     atomic.Int64
	sent, errs  atomic.Int64
	first, last atomic.Int64
	stop        chan struct{}
	stopOnce    sync.Once
	done        chan struct{}
}

// end asks the session to stop and waits until it has.
func (p *ppsSession) end() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *ppsSession) stats() PPSStats {
	st := PPSStats{Op: p.op, ID: p.id, Active: p.active.Load(), Peer: p.peer.String(), Count: p.count, Size: p.size, Rate: p.rate,
		Received: p.received.Load(), Gaps: p.gaps.Load(), Late: p.late.Load(), Next: p.next.Load(), Refused: p.refused.Load(), Duplicates: p.dups.Load(),
		Sent: p.sent.Load(), SendErrors: p.errs.Load(), StartNs: p.startNs, FirstNs: p.first.Load(), LastNs: p.last.Load()}
	if p.op == "rx" {
		st.Lost = st.Count - st.Received
	}
	return st
}

// ppsParam parses query parameter k of r as an unsigned number in
// [lo, hi] (absent: def, if def >= 0).
func ppsParam(r *http.Request, k string, lo, hi, def int64) (int64, error) {
	v := r.URL.Query().Get(k)
	if v == "" {
		if def >= 0 {
			return def, nil
		}
		return 0, fmt.Errorf("%s: missing", k)
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil || int64(n) < lo || int64(n) > hi {
		return 0, fmt.Errorf("%s: want %d to %d", k, lo, hi)
	}
	return int64(n), nil
}

// ppsGet answers GET /pps (control token).
func (s *Server) ppsGet(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	s.pps.mu.Lock()
	cur := s.pps.cur
	s.pps.mu.Unlock()
	var st PPSStats
	if cur != nil {
		st = cur.stats()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// ppsPost answers POST /pps (control token): starts or stops a session.
func (s *Server) ppsPost(w http.ResponseWriter, r *http.Request) {
	if !s.authorised(w, r) {
		return
	}
	op := r.URL.Query().Get("op")
	if op == "stop" {
		s.pps.mu.Lock()
		cur := s.pps.cur
		s.pps.mu.Unlock()
		if cur != nil {
			cur.end()
		}
		fmt.Fprintln(w, "stopped")
		return
	}
	if op != "rx" && op != "tx" {
		http.Error(w, "op: want rx, tx or stop", http.StatusBadRequest)
		return
	}
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "caller's address: "+err.Error(), http.StatusBadRequest)
		return
	}
	p := &ppsSession{op: op, stop: make(chan struct{}), done: make(chan struct{})}
	var port, id, secs, delay int64
	bad := func(err error) bool {
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		return false
	}
	if port, err = ppsParam(r, "port", 1, 65535, -1); bad(err) {
		return
	}
	if noEchoPorts[uint16(port)] {
		// Never a datagram to a service that answers datagrams.
		bad(fmt.Errorf("port: %d answers datagrams", port))
		return
	}
	if id, err = ppsParam(r, "id", 0, 1<<62, -1); bad(err) {
		return
	}
	if p.count, err = ppsParam(r, "count", 1, PPSMaxCount, -1); bad(err) {
		return
	}
	p.id, p.peer = uint64(id), netip.AddrPortFrom(remote.Addr().Unmap(), uint16(port))
	var length time.Duration
	if op == "rx" {
		if secs, err = ppsParam(r, "secs", 1, int64(PPSMaxTime/time.Second), -1); bad(err) {
			return
		}
		length = time.Duration(secs) * time.Second
		p.seen = make([]uint64, (p.count+63)/64)
	} else {
		var size, rate int64
		if size, err = ppsParam(r, "size", PPSHeader, PPSMaxSize, -1); bad(err) {
			return
		}
		if rate, err = ppsParam(r, "rate", 1, PPSMaxRate, -1); bad(err) {
			return
		}
		if delay, err = ppsParam(r, "delay_ms", 0, int64(ppsMaxDelay/time.Millisecond), 0); bad(err) {
			return
		}
		// count <= 2^20 and 10^9 < 2^30: no overflow.
		length = time.Duration(p.count * int64(time.Second) / rate)
		if length > PPSMaxTime {
			bad(fmt.Errorf("count/rate: %v, longer than %v", length, PPSMaxTime))
			return
		}
		p.size, p.rate = int(size), int(rate)
	}
	// A session still active past its deadline (a source's write that
	// waits for room in a send buffer a stuck link never gives back: the
	// source looks at its deadline only between datagrams) is ended here,
	// outside the lock, rather than refusing every session until a stop.
	s.pps.mu.Lock()
	old := s.pps.cur
	s.pps.mu.Unlock()
	if old != nil && old.active.Load() && time.Now().After(old.deadline) {
		old.end()
	}
	s.pps.mu.Lock()
	defer s.pps.mu.Unlock()
	if s.pps.cur != nil && s.pps.cur.active.Load() {
		http.Error(w, "a session is running (POST /pps?op=stop ends it)", http.StatusConflict)
		return
	}
	c, err := s.listenUDP(PPSPort)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.active.Store(true)
	p.start = time.Now()
	p.startNs = int64(p.start.Sub(s.Boot))
	s.pps.cur = p
	end := p.start.Add(time.Duration(delay)*time.Millisecond + length)
	p.deadline = end.Add(time.Second)
	// A stop ends a read or a write the session waits in at once (a
	// write waits while the stack's send queue is full), so that POST
	// /pps?op=stop never waits for more than one datagram.
	go func() {
		select {
		case <-p.stop:
			c.SetDeadline(time.Now())
		case <-p.done:
		}
	}()
	if op == "rx" {
		go s.ppsSink(p, c, end)
	} else {
		go s.ppsSource(p, c, time.Duration(delay)*time.Millisecond, p.deadline)
	}
	fmt.Fprintf(w, "op=%s id=%d peer=%s count=%d until=%v\n", op, p.id, p.peer, p.count, end.Sub(p.start))
}

// ppsFinish closes the session's port and marks it done.
func (s *Server) ppsFinish(p *ppsSession, c *gonet.UDPConn) {
	c.Close()
	p.active.Store(false)
	close(p.done)
}

// ppsSink counts the session's datagrams on c until end or a stop.
func (s *Server) ppsSink(p *ppsSession, c *gonet.UDPConn, end time.Time) {
	defer s.ppsFinish(p, c)
	// The bitmap is let go at the end (the session's counters stay
	// readable): before done, so that whoever waits for it sees nil.
	defer func() { p.seen = nil }()
	c.SetReadDeadline(end)
	buf := make([]byte, ppsBufSize)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		p.count1(buf[:n], from, time.Since(p.start))
	}
}

// count1 counts one datagram b from from, at t into the session.
func (p *ppsSession) count1(b []byte, from net.Addr, t time.Duration) {
	ua, ok := from.(*net.UDPAddr)
	if !ok || len(b) < PPSHeader || ua.AddrPort().Addr().Unmap() != p.peer.Addr() || ua.AddrPort().Port() != p.peer.Port() ||
		binary.BigEndian.Uint64(b) != p.id {
		p.refused.Add(1)
		return
	}
	seq := binary.BigEndian.Uint64(b[8:])
	// The sequence is compared with count (at most PPSMaxCount) before
	// any arithmetic or indexing: a hostile number cannot make gaps wrap
	// or index past seen.
	if seq >= uint64(p.count) {
		p.refused.Add(1)
		return
	}
	// A repeat is counted apart: taken as a late one, it was subtracted
	// from the loss and hid a datagram never received.
	w, bit := seq/64, uint64(1)<<(seq%64)
	if p.seen[w]&bit != 0 {
		p.dups.Add(1)
		return
	}
	p.seen[w] |= bit
	next := p.next.Load()
	switch {
	case seq < next:
		p.late.Add(1)
	default:
		p.gaps.Add(int64(seq - next))
		p.next.Store(seq + 1)
	}
	if p.received.Add(1) == 1 {
		p.first.Store(int64(t))
	}
	p.last.Store(int64(t))
}

// ppsSource sends the session's datagrams on c after delay, paced to its
// rate, until they are all sent, a stop, or deadline (checked between
// datagrams). Its waits are time.Sleep of at most ppsStopCheck, then a
// look at the stop: a runtime timer that a stop could cut short (a Timer
// reset per datagram and a select) cost 3 k more guest instructions per
// datagram at 250/s, and a write deadline pending through the session
// 1.5 k more (tamanic-pps, tx:tso:512, 64 B, icount), which both
// firmwares' figures would carry. A write blocked while the stack's
// send queue is full is cut short by a stop (the watcher in ppsPost).
func (s *Server) ppsSource(p *ppsSession, c *gonet.UDPConn, delay time.Duration, deadline time.Time) {
	defer s.ppsFinish(p, c)
	to := net.UDPAddrFromAddrPort(p.peer)
	buf := make([]byte, p.size)
	binary.BigEndian.PutUint64(buf, p.id)
	copy(buf[PPSHeader:], Pattern)
	stopped := func() bool {
		select {
		case <-p.stop:
			return true
		default:
			return false
		}
	}
	// sleepUntil waits until t, or returns false on a stop.
	sleepUntil := func(t time.Time) bool {
		for now := time.Now(); now.Before(t); now = time.Now() {
			time.Sleep(min(t.Sub(now), ppsStopCheck))
			if stopped() {
				return false
			}
		}
		return true
	}
	if !sleepUntil(time.Now().Add(delay)) {
		return
	}
	t0 := time.Now()
	for i := int64(0); i < p.count; {
		// i < 2^20 and 10^9 < 2^30: no overflow.
		due := t0.Add(time.Duration(i * int64(time.Second) / int64(p.rate)))
		if now := time.Now(); now.Before(due) {
			if now.After(deadline) || !sleepUntil(due) {
				return
			}
			continue
		}
		binary.BigEndian.PutUint64(buf[8:], uint64(i))
		if _, err := c.WriteTo(buf, to); err != nil {
			p.errs.Add(1)
		} else {
			p.sent.Add(1)
		}
		t := int64(time.Since(p.start))
		if i == 0 {
			p.first.Store(t)
		}
		p.last.Store(t)
		i++
		if i%64 == 0 && (stopped() || time.Now().After(deadline)) {
			return
		}
	}
}
