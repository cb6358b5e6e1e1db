package iperf3

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClient speaks the client side of the protocol step by step so tests
// can misbehave at any point.
type fakeClient struct {
	t      *testing.T
	ts     *testServer
	ctrl   net.Conn
	cookie []byte
	// local, if set, is the address the client dials from (another peer
	// on loopback: 127.0.0.2, ...).
	local string
}

// cookieSeq numbers dialFake's cookies: each is unique in the package
// run, whatever order the tests run in.
var cookieSeq atomic.Uint64

// testCookie returns a valid cookie (36 printable characters and a NUL):
// tag, then n in decimal. Cookies of different tags never collide, so a
// test that needs a cookie no client holds (a wrong-cookie stream) uses a
// tag of its own rather than a number dialFake might reach.
func testCookie(tag string, n uint64) []byte {
	ck := []byte(fmt.Sprintf("%s%0*d", tag, CookieSize-1-len(tag), n))
	return append(ck[:CookieSize-1], 0)
}

// dialFake opens a control connection and sends a valid cookie.
func dialFake(t *testing.T, ts *testServer) *fakeClient {
	t.Helper()
	c := &fakeClient{t: t, ts: ts, cookie: testCookie("fake", cookieSeq.Add(1))}
	c.ctrl = c.dial(c.cookie)
	t.Cleanup(func() { c.ctrl.Close() })
	return c
}

// dial connects to the server and writes b.
func (c *fakeClient) dial(b []byte) net.Conn {
	c.t.Helper()
	d := net.Dialer{}
	if c.local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.local)}
	}
	conn, err := d.Dial("tcp4", c.ts.addr())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
	return conn
}

// readState reads one state byte from conn.
func readState(t *testing.T, conn net.Conn) int8 {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		t.Fatalf("reading a state byte: %v", err)
	}
	return int8(b[0])
}

func (c *fakeClient) expect(want int8) {
	c.t.Helper()
	if got := readState(c.t, c.ctrl); got != want {
		c.t.Fatalf("state %d, want %d", got, want)
	}
}

// expectError reads SERVER_ERROR and its i_errno.
func (c *fakeClient) expectError(code int32) {
	c.t.Helper()
	c.expect(stateServerError)
	var b [8]byte
	if _, err := io.ReadFull(c.ctrl, b[:]); err != nil {
		c.t.Fatalf("reading SERVER_ERROR codes: %v", err)
	}
	if got := int32(binary.BigEndian.Uint32(b[:])); got != code {
		c.t.Fatalf("SERVER_ERROR i_errno %d, want %d", got, code)
	}
}

func (c *fakeClient) send(b ...byte) {
	c.t.Helper()
	if _, err := c.ctrl.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *fakeClient) sendJSON(v any) {
	c.t.Helper()
	if err := writeJSON(c.ctrl, v); err != nil {
		c.t.Fatal(err)
	}
}

// start runs PARAM_EXCHANGE with params and waits for CREATE_STREAMS.
func (c *fakeClient) start(params map[string]any) {
	c.t.Helper()
	c.expect(stateParamExchange)
	c.sendJSON(params)
	c.expect(stateCreateStreams)
}

// tcpStream opens a data stream with the test's cookie.
func (c *fakeClient) tcpStream() net.Conn { return c.dial(c.cookie) }

// finish ends a running test and checks the results exchange.
func (c *fakeClient) finish(clientBytes uint64) results {
	c.t.Helper()
	c.send(stateByte(stateTestEnd))
	c.expect(stateExchangeResults)
	c.sendJSON(results{SenderHasRetransmits: -1, Streams: []streamResult{{ID: 1, Bytes: clientBytes}}})
	c.ctrl.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := readJSON(c.ctrl, maxResultsJSON)
	if err != nil {
		c.t.Fatalf("server results: %v", err)
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		c.t.Fatalf("server results %q: %v", b, err)
	}
	c.expect(stateDisplayResults)
	c.send(stateByte(stateIperfDone))
	return r
}

var tcpParams = map[string]any{"tcp": true, "time": 1, "parallel": 1, "len": 1024, "client_version": "fake"}

// fullTCP runs a complete one-stream forward TCP test with the fake client
// and checks that the server counted exactly what was sent.
func fullTCP(t *testing.T, ts *testServer) {
	t.Helper()
	c := dialFake(t, ts)
	c.start(tcpParams)
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	payload := bytes.Repeat([]byte{0x5a}, 1000)
	for range 10 {
		if _, err := s.Write(payload); err != nil {
			t.Fatal(err)
		}
	}
	// The server has counted everything once it has read it all; TCP
	// gives no earlier signal, so wait for its counter.
	waitFor(t, "server counted 10000 bytes", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active != nil && ts.active.progress() == 10000
	})
	r := c.finish(10000)
	if len(r.Streams) != 1 || r.Streams[0].Bytes != 10000 || r.Streams[0].ID != 1 {
		t.Fatalf("server results %+v, want one stream of 10000 bytes", r)
	}
	ts.idle(t)
}

// settle waits for the server to go idle and checks one counter moved.
func settle(t *testing.T, ts *testServer, what string, counter func(Stats) uint64, want uint64) {
	t.Helper()
	waitFor(t, what+" counted", func() bool { return counter(ts.Stats()) >= want })
	ts.idle(t)
	if got := counter(ts.Stats()); got != want {
		t.Fatalf("%s = %d, want %d; stats %+v", what, got, want, ts.Stats())
	}
}

func TestHostileCookies(t *testing.T) {
	// Short enough to keep the test quick, long enough that a loaded
	// machine does not stall a well-behaved client past it.
	ts := startServer(t, Config{HandshakeTimeout: time.Second})
	bad := func(s Stats) uint64 { return s.BadCookie }

	// 37 bytes without the NUL: refused with ACCESS_DENIED.
	c := &fakeClient{t: t, ts: ts}
	conn := c.dial(bytes.Repeat([]byte{'x'}, CookieSize))
	if got := readState(t, conn); got != stateAccessDenied {
		t.Fatalf("malformed cookie answered %d, want ACCESS_DENIED", got)
	}
	settle(t, ts, "BadCookie", bad, 1)

	// Control characters in the cookie.
	ck := testCookie("ctl", 0)
	ck[3] = '\n'
	conn = c.dial(ck)
	if got := readState(t, conn); got != stateAccessDenied {
		t.Fatalf("cookie with a newline answered %d, want ACCESS_DENIED", got)
	}
	settle(t, ts, "BadCookie", bad, 2)

	// A short cookie, then EOF.
	conn = c.dial([]byte("abc"))
	conn.(*net.TCPConn).CloseWrite()
	settle(t, ts, "BadCookie", bad, 3)

	// Silence: dropped after HandshakeTimeout.
	conn = c.dial(nil)
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent client: read %d, %v; want EOF once the server gives up", n, err)
	}
	settle(t, ts, "BadCookie", bad, 4)

	fullTCP(t, ts)
}

func TestHostileParams(t *testing.T) {
	ts := startServer(t, Config{})
	bad := func(s Stats) uint64 { return s.BadParams }
	cases := []struct {
		name string
		send func(c *fakeClient)
		code int32
	}{
		{"garbage", func(c *fakeClient) { c.send(0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o') }, ieRecvParams},
		{"not an object", func(c *fakeClient) { c.send(0, 0, 0, 4, 'n', 'u', 'l', 'l') }, ieRecvParams},
		{"oversized", func(c *fakeClient) { c.send(0x7f, 0xff, 0xff, 0xff, '{') }, ieRecvParams},
		{"empty", func(c *fakeClient) { c.send(0, 0, 0, 0) }, ieRecvParams},
		{"too many streams", func(c *fakeClient) { c.sendJSON(map[string]any{"tcp": true, "parallel": 1000}) }, ieNumStreams},
		{"negative time", func(c *fakeClient) { c.sendJSON(map[string]any{"tcp": true, "time": -1}) }, ieDuration},
		{"huge block", func(c *fakeClient) { c.sendJSON(map[string]any{"tcp": true, "len": 1 << 30}) }, ieBlockSize},
		{"tiny UDP block", func(c *fakeClient) { c.sendJSON(map[string]any{"udp": true, "len": 8}) }, ieUDPBlockSize},
		{"sctp", func(c *fakeClient) { c.sendJSON(map[string]any{"sctp": true}) }, ieProtocol},
		{"time is a string", func(c *fakeClient) { c.sendJSON(map[string]any{"tcp": true, "time": "10"}) }, ieRecvParams},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialFake(t, ts)
			c.expect(stateParamExchange)
			tc.send(c)
			c.expectError(tc.code)
			settle(t, ts, "BadParams", bad, uint64(i+1))
		})
	}
	// A client that sends half a JSON object and goes quiet is dropped.
	ts2 := startServer(t, Config{HandshakeTimeout: 300 * time.Millisecond})
	c := dialFake(t, ts2)
	c.expect(stateParamExchange)
	c.send(0, 0, 0, 100, '{')
	c.expectError(ieRecvParams)
	settle(t, ts2, "BadParams", bad, 1)
	fullTCP(t, ts)
}

func TestStreamsNeverConnect(t *testing.T) {
	ts := startServer(t, Config{StreamTimeout: time.Second})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 1, "parallel": 2})
	c.tcpStream() // one of two
	c.expectError(ieStreamAccept)
	settle(t, ts, "Timeouts", func(s Stats) uint64 { return s.Timeouts }, 1)
	if !strings.Contains(ts.Stats().LastError, "1 of 2 streams") {
		t.Errorf("LastError %q", ts.Stats().LastError)
	}

	// UDP: the stream handshake never comes.
	c = dialFake(t, ts)
	c.start(map[string]any{"udp": true, "time": 1, "parallel": 1, "bandwidth": 1e6})
	c.expectError(ieStreamAccept)
	settle(t, ts, "Timeouts", func(s Stats) uint64 { return s.Timeouts }, 2)
	fullTCP(t, ts)
}

func TestWrongCookieStreamAndBusy(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialFake(t, ts)
	c.start(tcpParams)

	// A stream with another cookie is refused and the test goes on.
	intruder := c.dial(testCookie("intruder", 0))
	if got := readState(t, intruder); got != stateAccessDenied {
		t.Fatalf("wrong-cookie stream answered %d, want ACCESS_DENIED", got)
	}
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)

	// A second client while the test runs is told the server is busy.
	other := dialFake(t, ts)
	other.expect(stateAccessDenied)
	if _, err := s.Write(make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "500 bytes counted", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active.progress() == 500
	})
	r := c.finish(500)
	if r.Streams[0].Bytes != 500 {
		t.Fatalf("results %+v", r)
	}
	settle(t, ts, "Denied", func(s Stats) uint64 { return s.Denied }, 2)
	if st := ts.Stats(); st.Completed != 1 || st.Aborted != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestClientMisbehavesMidTest(t *testing.T) {
	ts := startServer(t, Config{})
	running := func() (*fakeClient, net.Conn) {
		c := dialFake(t, ts)
		c.start(tcpParams)
		s := c.tcpStream()
		c.expect(stateTestStart)
		c.expect(stateTestRunning)
		return c, s
	}

	// Vanishes: control and stream closed without a word.
	c, s := running()
	s.Write(make([]byte, 100))
	s.Close()
	c.ctrl.Close()
	settle(t, ts, "ClientGone", func(s Stats) uint64 { return s.ClientGone }, 1)

	// Sends a state that means nothing here.
	c, _ = running()
	c.send(99)
	c.expectError(ieMessage)
	settle(t, ts, "BadMessages", func(s Stats) uint64 { return s.BadMessages }, 1)

	// Terminates (Ctrl-C on the client).
	c, _ = running()
	c.send(stateByte(stateClientTerminate))
	settle(t, ts, "ClientTerminated", func(s Stats) uint64 { return s.ClientTerminated }, 1)

	// Sends garbage instead of its results.
	c, _ = running()
	c.send(stateByte(stateTestEnd))
	c.expect(stateExchangeResults)
	c.sendJSON(map[string]any{"streams": "no"})
	c.expectError(ieRecvResults)
	settle(t, ts, "BadResults", func(s Stats) uint64 { return s.BadResults }, 1)

	// Vanishes while the server sends (-R): writes fail, the test ends.
	c = dialFake(t, ts)
	p := map[string]any{"tcp": true, "time": 10, "parallel": 1, "reverse": true}
	c.start(p)
	s = c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	s.Close()
	c.ctrl.Close()
	settle(t, ts, "ClientGone", func(s Stats) uint64 { return s.ClientGone }, 2)

	if st := ts.Stats(); st.Aborted != 5 || st.Completed != 0 {
		t.Fatalf("stats %+v", st)
	}
	fullTCP(t, ts)
}

// TestIdleWatchdog: a client that goes quiet with everything open is cut
// off once nothing has moved for IdleTimeout, in either direction.
func TestIdleWatchdog(t *testing.T) {
	ts := startServer(t, Config{IdleTimeout: 300 * time.Millisecond})
	c := dialFake(t, ts)
	c.start(tcpParams)
	c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	c.expectError(ieNoMsg)
	settle(t, ts, "Timeouts", func(s Stats) uint64 { return s.Timeouts }, 1)

	// -R to a client that never reads: the server's writes stall once the
	// socket buffers fill.
	c = dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 60, "parallel": 1, "reverse": true})
	c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	c.expectError(ieNoMsg)
	settle(t, ts, "Timeouts", func(s Stats) uint64 { return s.Timeouts }, 2)
	if !strings.Contains(ts.Stats().LastError, "no data moved") {
		t.Errorf("LastError %q", ts.Stats().LastError)
	}
}

func TestCloseDuringTest(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 30, "parallel": 1, "reverse": true})
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	go io.Copy(io.Discard, s)
	silent := &fakeClient{t: t, ts: ts}
	silent.dial(nil) // waiting for its cookie
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	c.expect(stateServerTerminate)
	if n := ts.Goroutines(); n != 0 {
		t.Fatalf("%d goroutines after Close", n)
	}
	if st := ts.Stats(); st.ServerClosed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOverloaded(t *testing.T) {
	ts := startServer(t, Config{MaxPending: 2, HandshakeTimeout: 5 * time.Second})
	c := &fakeClient{t: t, ts: ts}
	a, b := c.dial(nil), c.dial(nil)
	waitFor(t, "two handshakes pending", func() bool { return ts.Goroutines() == 3 })
	third := c.dial(nil)
	third.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil {
		t.Fatal("third pending connection was not closed")
	}
	if st := ts.Stats(); st.Overloaded != 1 {
		t.Fatalf("stats %+v", st)
	}
	a.Close()
	b.Close()
	ts.idle(t)
	fullTCP(t, ts)
}

func TestSameHost(t *testing.T) {
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	b := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
	c := &net.TCPAddr{IP: net.IPv4(10, 0, 2, 2), Port: 2}
	if !sameHost(a, b) || sameHost(a, c) {
		t.Fatal("sameHost compares IPs")
	}
}

// TestBackToBack: a client that connects while the previous test waits
// for its IPERF_DONE is served once that test ends, not refused, as
// scripts run iperf3 back to back.
func TestBackToBack(t *testing.T) {
	ts := startServer(t, Config{})
	a := dialFake(t, ts)
	a.start(tcpParams)
	a.tcpStream()
	a.expect(stateTestStart)
	a.expect(stateTestRunning)
	a.send(stateByte(stateTestEnd))
	a.expect(stateExchangeResults)
	a.sendJSON(results{SenderHasRetransmits: -1, Streams: []streamResult{{ID: 1}}})
	if _, err := readJSON(a.ctrl, maxResultsJSON); err != nil {
		t.Fatal(err)
	}
	a.expect(stateDisplayResults)

	b := dialFake(t, ts)
	// b waits for a; nothing arrives on b until a says IPERF_DONE.
	b.ctrl.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := b.ctrl.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second client got %d bytes, %v before the first finished", n, err)
	}
	a.send(stateByte(stateIperfDone))
	b.expect(stateParamExchange)
	b.ctrl.Close()
	settle(t, ts, "ClientGone", func(s Stats) uint64 { return s.ClientGone }, 1)
	if st := ts.Stats(); st.Completed != 1 || st.Denied != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamOrder: streams take their roles in the order they connected,
// even when a later one's cookie is read first. With --bidir the client's
// first stream sends and its second receives.
func TestStreamOrder(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 1, "parallel": 1, "bidirectional": true, "len": 1000})
	first := c.dial(nil)
	waitFor(t, "first stream accepted", func() bool { return ts.Goroutines() == 4 }) // UDP reader, control, control reader, first stream
	second := c.tcpStream()
	waitFor(t, "second stream registered", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.active.streams) == 1
	})
	first.Write(c.cookie)
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	second.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadFull(second, make([]byte, 1000)); err != nil {
		t.Fatalf("the server does not send on the second stream: %v", err)
	}
	if _, err := first.Write(make([]byte, 300)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "300 bytes received on the first stream", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active.streams[0].bytes.Load() == 300 && !ts.active.streams[0].sender
	})
	c.finish(300)
	ts.idle(t)
}
