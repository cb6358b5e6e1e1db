package iperf3

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// phase is where a test stands; the UDP reader and the stream accept path
// read it under Server.mu.
type phase int

const (
	phaseParams  phase = iota // reading the parameters
	phaseCreate               // waiting for the streams
	phaseRunning              // counting
	phaseEnded                // TEST_END received or test aborted
)

// stream is one data connection of a test.
type stream struct {
	order  uint64 // when it connected, for numbering
	id     int
	sender bool     // the server sends on it
	conn   net.Conn // TCP
	peer   net.Addr // UDP

	bytes   atomic.Uint64 // counted while running
	packets atomic.Uint64 // UDP datagrams sent, for sending streams

	mu  sync.Mutex // guards udp, written by the UDP reader
	udp udpRecvStats

	// Snapshots taken when the -O seconds end.
	omitBytes, omitPackets, omitLost uint64
}

// test is one client's test, run by the goroutine that accepted its
// control connection.
type test struct {
	s      *Server
	ctrl   net.Conn
	cookie [CookieSize]byte
	p      Params

	// Guarded by s.mu.
	phase    phase
	streams  []*stream
	want     int // streams expected
	udpPeers map[string]*stream
	ready    chan struct{} // closed when the last stream arrives

	wrapping chan struct{} // closed just before DISPLAY_RESULTS is sent
	over     chan struct{} // closed once the server is free again

	counting atomic.Bool   // bytes count between TEST_START and TEST_END
	quit     chan struct{} // closed when the test ends: senders stop
	wg       sync.WaitGroup
	sent     atomic.Uint64 // bytes sent over all sending streams (-n)
	blocks   atomic.Uint64 // blocks sent over all sending streams (-k)
	payload  []byte
}

func newTest(s *Server, c net.Conn, ck [CookieSize]byte) *test {
	return &test{s: s, ctrl: c, cookie: ck, udpPeers: make(map[string]*stream),
		ready: make(chan struct{}), quit: make(chan struct{}), wrapping: make(chan struct{}), over: make(chan struct{})}
}

// abort carries why a test ended early and which counter to bump.
type abort struct {
	counter *uint64
	code    int32 // i_errno for SERVER_ERROR, 0 for none
	err     error
}

func (t *test) fail(counter *uint64, code int32, format string, a ...any) *abort {
	return &abort{counter: counter, code: code, err: fmt.Errorf(format, a...)}
}

// addTCPStream adopts c, accepted as the order-th connection, as a
// stream if the test is waiting for TCP streams; the caller holds s.mu.
func (t *test) addTCPStream(c net.Conn, order uint64) bool {
	if t.p.UDP {
		return false
	}
	st, last := t.addStreamLocked(order)
	if st == nil {
		return false
	}
	// The deadline set for the cookie would otherwise end the stream's
	// reads HandshakeTimeout after it connected; the test's own watchdogs
	// (IdleTimeout, the deadline) bound it from here.
	c.SetReadDeadline(time.Time{})
	st.conn = c
	if last {
		close(t.ready)
	}
	return true
}

// addStreamLocked appends a stream while CREATE_STREAMS lasts. The caller
// holds s.mu. Once all have come, they are put back in the order they
// connected (cookies are read concurrently, so they may register out of
// order) and given their roles and numbers as the reference
// implementation does: receiving streams first, then sending ones,
// numbered 1, 3, 4, 5... last reports that this was the last stream: the
// caller closes t.ready once the stream is complete (its connection set,
// or its UDP connect reply sent), so the test cannot start before.
func (t *test) addStreamLocked(order uint64) (st *stream, last bool) {
	if t.phase != phaseCreate || len(t.streams) >= t.want {
		return nil, false
	}
	st = &stream{order: order}
	t.streams = append(t.streams, st)
	if len(t.streams) < t.want {
		return st, false
	}
	sort.Slice(t.streams, func(i, j int) bool { return t.streams[i].order < t.streams[j].order })
	for n, sm := range t.streams {
		sm.id = 1
		if n > 0 {
			sm.id = n + 2
		}
		if t.p.Bidir {
			sm.sender = n >= t.p.Streams
		} else {
			sm.sender = t.p.Reverse
		}
	}
	return st, true
}

func (t *test) setPhase(p phase) {
	t.s.mu.Lock()
	t.phase = p
	t.s.mu.Unlock()
}

// send writes one state byte, or any control bytes, within the handshake
// timeout.
func (t *test) send(b ...byte) error {
	t.ctrl.SetWriteDeadline(time.Now().Add(t.s.cfg.HandshakeTimeout))
	if _, err := t.ctrl.Write(b); err != nil {
		return fmt.Errorf("control write: %w", err)
	}
	return nil
}

func (t *test) sendState(st int8) error { return t.send(byte(st)) }

// run drives the test to its end. It returns the test's result (nil if it
// never got past the parameters) and, if it ended early, the counter that
// says why and the reason.
func (t *test) run() (*Result, *uint64, string) {
	res := &Result{}
	var start, end time.Time
	var cpu0 cpuSample
	ab := t.drive(res, &start, &end, &cpu0)
	t.cleanup()
	if res.Protocol == "" {
		res = nil
	}
	if ab == nil {
		return res, nil, ""
	}
	if ab.code != 0 {
		t.send(serverError(ab.code)...)
	}
	t.ctrl.Close()
	msg := fmt.Sprintf("test from %v ended early: %v", t.ctrl.RemoteAddr(), ab.err)
	t.s.logf("iperf3: %s", msg)
	if res != nil {
		res.Err = ab.err.Error()
	}
	return res, ab.counter, msg
}

// cleanup stops the streams and waits for their goroutines.
func (t *test) cleanup() {
	t.counting.Store(false)
	t.s.mu.Lock()
	t.phase = phaseEnded
	streams := t.streams
	t.s.mu.Unlock()
	select {
	case <-t.quit:
	default:
		close(t.quit)
	}
	for _, st := range streams {
		if st.conn != nil {
			st.conn.Close()
		}
	}
	t.wg.Wait()
}

// closing reports whether the server is shutting down.
func (t *test) closing() bool {
	select {
	case <-t.s.closed:
		return true
	default:
		return false
	}
}

// drive runs the state machine; a non-nil abort ends the test early.
func (t *test) drive(res *Result, start, end *time.Time, cpu0 *cpuSample) *abort {
	s, cfg := t.s, &t.s.cfg
	st := &s.stats

	// PARAM_EXCHANGE.
	if err := t.sendState(stateParamExchange); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}
	t.ctrl.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	b, err := readJSON(t.ctrl, maxParamsJSON)
	if err != nil {
		if t.closing() {
			return t.fail(&st.ServerClosed, 0, "server closed")
		}
		if errors.Is(err, io.EOF) {
			return t.fail(&st.ClientGone, 0, "closed before sending parameters")
		}
		return t.fail(&st.BadParams, ieRecvParams, "parameters: %w", err)
	}
	p, err := ParseParams(b, cfg.MaxStreams)
	if err != nil {
		var pe *paramError
		code := int32(ieRecvParams)
		if errors.As(err, &pe) {
			code = pe.code
		}
		return t.fail(&st.BadParams, code, "%w", err)
	}
	if time.Duration(p.Omit+p.Duration)*time.Second > cfg.MaxDuration {
		return t.fail(&st.BadParams, ieDuration, "parameters: omit=%d plus time=%d s longer than the longest test, %v", p.Omit, p.Duration, cfg.MaxDuration)
	}
	if p.UDP && s.udp == nil {
		return t.fail(&st.BadParams, ieProtocol, "parameters: UDP asked for but the server has no UDP socket")
	}
	res.Protocol = "tcp"
	if p.UDP {
		res.Protocol = "udp"
	}
	res.Reverse, res.Bidir, res.Streams, res.ClientVersion = p.Reverse, p.Bidir, p.Streams, p.ClientVersion
	if p.Reverse || p.Bidir {
		t.payload = make([]byte, p.BlockSize)
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5201))
		for i := range t.payload {
			t.payload[i] = byte(r.Uint32())
		}
	}

	// CREATE_STREAMS.
	s.mu.Lock()
	t.p = p
	t.want = p.Streams
	if p.Bidir {
		t.want *= 2
	}
	t.phase = phaseCreate
	s.mu.Unlock()
	if err := t.sendState(stateCreateStreams); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}
	t.ctrl.SetReadDeadline(time.Time{})
	msgs := make(chan int8, 1)
	if !s.spawn(func() { t.readControl(msgs) }) {
		return t.fail(&st.ServerClosed, 0, "server closed")
	}
	timer := time.NewTimer(cfg.StreamTimeout)
	defer timer.Stop()
	select {
	case <-t.ready:
	case m, ok := <-msgs:
		return t.unexpected(m, ok, "while waiting for streams")
	case <-timer.C:
		s.mu.Lock()
		got := len(t.streams)
		s.mu.Unlock()
		return t.fail(&st.Timeouts, ieStreamAccept, "%d of %d streams connected within %v", got, t.want, cfg.StreamTimeout)
	case <-s.closed:
		t.sendState(stateServerTerminate)
		return t.fail(&st.ServerClosed, 0, "server closed")
	}

	// TEST_START, TEST_RUNNING.
	*cpu0 = sampleCPU(cfg.CPU)
	*start = cpu0.wall
	t.counting.Store(true)
	t.setPhase(phaseRunning)
	for _, sm := range t.streams {
		sm := sm
		var f func()
		switch {
		case sm.sender && p.UDP:
			f = func() { t.sendUDP(sm, *start) }
		case sm.sender:
			f = func() { t.sendTCP(sm, *start) }
		case !p.UDP:
			f = func() { t.recvTCP(sm) }
		default:
			continue // the UDP reader feeds it
		}
		t.wg.Add(1)
		if !s.spawn(func() { defer t.wg.Done(); f() }) {
			t.wg.Done()
			return t.fail(&st.ServerClosed, 0, "server closed")
		}
	}
	if err := t.send(stateByte(stateTestStart), stateByte(stateTestRunning)); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}

	tick := time.NewTicker(min(cfg.IdleTimeout/4, 250*time.Millisecond))
	defer tick.Stop()
	lastProgress, lastMove := t.progress(), time.Now()
	omitEnd := start.Add(time.Duration(p.Omit) * time.Second)
	omitted := p.Omit == 0
	// Every test has a deadline that nothing the client sends renews; a
	// timed one's (-O plus -t, at most MaxDuration) is the sooner.
	deadline := start.Add(cfg.MaxDuration + cfg.Grace)
	overrun := fmt.Sprintf("no TEST_END %v after the longest test, %v", cfg.Grace, cfg.MaxDuration)
	if p.Duration > 0 {
		deadline = omitEnd.Add(time.Duration(p.Duration)*time.Second + cfg.Grace)
		overrun = fmt.Sprintf("no TEST_END %v after the %d s test", cfg.Grace, p.Duration)
	}
running:
	for {
		select {
		case m, ok := <-msgs:
			if ok && m == stateTestEnd {
				break running
			}
			return t.unexpected(m, ok, "while running")
		case now := <-tick.C:
			if !omitted && !now.Before(omitEnd) {
				omitted = true
				t.snapshotOmit()
				*start = now
			}
			if pr := t.progress(); pr != lastProgress {
				lastProgress, lastMove = pr, now
			} else if now.Sub(lastMove) > cfg.IdleTimeout {
				return t.fail(&st.Timeouts, ieNoMsg, "no data moved for %v", cfg.IdleTimeout)
			}
			if now.After(deadline) {
				return t.fail(&st.Timeouts, ieNoMsg, "%s", overrun)
			}
		case <-s.closed:
			t.sendState(stateServerTerminate)
			return t.fail(&st.ServerClosed, 0, "server closed")
		}
	}

	// TEST_END: stop counting, close the streams, exchange results.
	*end = time.Now()
	cpu1 := sampleCPU(cfg.CPU)
	t.cleanup()
	if !omitted {
		*start = *end // the test ended inside -O: nothing counted
		for _, sm := range t.streams {
			sm.omitBytes = sm.bytes.Load()
		}
	}
	ours := t.results(res, *start, *end, cpu0, &cpu1)
	if err := t.sendState(stateExchangeResults); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}
	t.ctrl.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	b, err = readJSON(t.ctrl, maxResultsJSON)
	if err != nil {
		return t.fail(&st.BadResults, ieRecvResults, "client results: %w", err)
	}
	theirs, err := parseResults(b)
	if err != nil {
		return t.fail(&st.BadResults, ieRecvResults, "client %w", err)
	}
	for _, r := range theirs.Streams {
		res.ClientBytes += r.Bytes
	}
	t.ctrl.SetWriteDeadline(time.Now().Add(cfg.HandshakeTimeout))
	if err := writeJSON(t.ctrl, ours); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}
	// From here a new client waits for this test to end rather than
	// being denied; marked before DISPLAY_RESULTS leaves, so that a client
	// started when the previous one exits always finds it marked.
	close(t.wrapping)
	if err := t.sendState(stateDisplayResults); err != nil {
		return t.fail(&st.ClientGone, 0, "%w", err)
	}

	// The client closes after IPERF_DONE; either ends the test.
	var one [1]byte
	if _, err := io.ReadFull(t.ctrl, one[:]); err == nil && int8(one[0]) != stateIperfDone {
		s.logf("iperf3: client %v sent state %d after DISPLAY_RESULTS", t.ctrl.RemoteAddr(), int8(one[0]))
	}
	t.ctrl.Close()
	return nil
}

// unexpected turns a control message that is not TEST_END into an abort.
func (t *test) unexpected(m int8, ok bool, when string) *abort {
	st := &t.s.stats
	switch {
	case t.closing():
		t.sendState(stateServerTerminate)
		return t.fail(&st.ServerClosed, 0, "server closed")
	case !ok:
		return t.fail(&st.ClientGone, 0, "control connection lost %s", when)
	case m == stateClientTerminate:
		return t.fail(&st.ClientTerminated, 0, "client terminated %s", when)
	case m == stateIperfDone:
		return t.fail(&st.ClientGone, 0, "client sent IPERF_DONE %s", when)
	default:
		return t.fail(&st.BadMessages, ieMessage, "unknown control state %d %s", m, when)
	}
}

// readControl forwards the client's state bytes until TEST_END, a
// terminal state or an error (which closes msgs).
func (t *test) readControl(msgs chan<- int8) {
	var b [1]byte
	for {
		if _, err := io.ReadFull(t.ctrl, b[:]); err != nil {
			close(msgs)
			return
		}
		m := int8(b[0])
		select {
		case msgs <- m:
		case <-t.quit:
			return
		}
		if m != stateTestStart && m != stateTestRunning {
			return
		}
	}
}

// progress sums every stream's counters so the watchdog can tell whether
// anything moved.
func (t *test) progress() uint64 {
	var n uint64
	for _, st := range t.streams {
		n += st.bytes.Load()
	}
	return n
}

// snapshotOmit records the counters at the end of -O; results count from
// there.
func (t *test) snapshotOmit() {
	for _, st := range t.streams {
		st.omitBytes = st.bytes.Load()
		st.omitPackets = st.packets.Load()
		st.mu.Lock()
		if !st.sender {
			st.omitPackets, st.omitLost = st.udp.highest, st.udp.lost
		}
		st.mu.Unlock()
	}
}

// results builds the server's EXCHANGE_RESULTS object and fills res.
func (t *test) results(res *Result, start, end time.Time, cpu0, cpu1 *cpuSample) results {
	p := t.p
	var r results
	r.CPUTotal, r.CPUUser, r.CPUSystem = cpuUtil(*cpu0, *cpu1)
	res.CPUTotal, res.CPUUser, res.CPUSystem = r.CPUTotal, r.CPUUser, r.CPUSystem
	r.SenderHasRetransmits = -1
	if p.Reverse || p.Bidir {
		r.SenderHasRetransmits = 0 // no TCP_INFO here
	}
	elapsed := end.Sub(start)
	res.Elapsed = elapsed
	for _, st := range t.streams {
		sr := streamResult{ID: st.id, Bytes: st.bytes.Load() - st.omitBytes, Retransmits: -1,
			EndTime: elapsed.Seconds()}
		if st.sender {
			res.BytesSent += sr.Bytes
			if p.UDP {
				sr.Packets = st.packets.Load()
				sr.OmittedPackets = st.omitPackets
				res.PacketsSent += sr.Packets
			}
		} else {
			res.BytesReceived += sr.Bytes
			if p.UDP {
				st.mu.Lock()
				u := st.udp
				st.mu.Unlock()
				sr.Jitter, sr.Errors, sr.Packets = u.jitter, u.lost, u.highest
				sr.OmittedErrors, sr.OmittedPackets = st.omitLost, st.omitPackets
				res.Packets += u.highest
				res.Lost += u.lost
				res.OutOfOrder += u.outOfOrder
				res.Jitter += u.jitter / float64(p.Streams)
			}
		}
		r.Streams = append(r.Streams, sr)
	}
	if p.ServerOutput {
		r.ServerOutputText = fmt.Sprintf("tamanic iperf3 server: %s, %d stream(s), %.3f s, received %d bytes, sent %d bytes, CPU %.1f%%\n",
			res.Protocol, len(t.streams), elapsed.Seconds(), res.BytesReceived, res.BytesSent, res.CPUTotal)
	}
	return r
}
