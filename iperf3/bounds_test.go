package iperf3

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWaitersBounded: once a test is past its results, connections with a
// valid cookie wait for it to end, but at most MaxWaiters of them; the
// rest are denied at once, not parked for HandshakeTimeout each (a flood
// of valid cookies parked one goroutine and its buffers per connection).
func TestWaitersBounded(t *testing.T) {
	ts := startServer(t, Config{MaxWaiters: 2, HandshakeTimeout: 30 * time.Second})
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

	var flood []*fakeClient
	for range 10 {
		flood = append(flood, dialFake(t, ts))
	}
	// Eight are denied while the first test still waits for IPERF_DONE
	// (30 s of handshake timeout: a waiter would not be refused sooner).
	waitFor(t, "eight denied", func() bool { return ts.Stats().Denied == 8 })
	// The denied connections' goroutines end once their ACCESS_DENIED is
	// written; then the UDP reader, the test and its control reader and
	// the 2 waiters remain (a waiter per connection stayed 30 s before).
	waitFor(t, "at most 6 server goroutines", func() bool { return ts.Goroutines() <= 1+2+2+1 })
	a.send(stateByte(stateIperfDone))
	// One waiter starts the next test; the other is denied (busy).
	var started int
	for _, f := range flood {
		f.ctrl.SetReadDeadline(time.Now().Add(15 * time.Second))
		var b [1]byte
		if _, err := io.ReadFull(f.ctrl, b[:]); err == nil && int8(b[0]) == stateParamExchange {
			started++
			f.ctrl.Close()
		}
	}
	if started != 1 {
		t.Fatalf("%d waiters started a test, want 1", started)
	}
	settle(t, ts, "Denied", func(s Stats) uint64 { return s.Denied }, 9)
}

// TestPendingSharedBetweenPeers: silent connections from one address
// cannot take every slot of connections waiting for their cookie: that
// peer holds at most 3 of 4, another peer runs a test beside them, and
// when the slots are full a third peer evicts the oldest of the peer
// holding the most (every other client was closed unread).
func TestPendingSharedBetweenPeers(t *testing.T) {
	ts := startServer(t, Config{MaxPending: 4, HandshakeTimeout: 30 * time.Second})
	hog := &fakeClient{t: t, ts: ts}
	var silent []net.Conn
	for range 4 {
		silent = append(silent, hog.dial(nil))
		waitFor(t, "accepted", func() bool {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			return len(ts.shakes) == min(len(silent), 3) && (len(silent) < 4 || ts.stats.Overloaded == 1)
		})
	}
	// A second peer runs a whole test beside them.
	c := &fakeClient{t: t, ts: ts, local: "127.0.0.2", cookie: testCookie("peer", cookieSeq.Add(1))}
	c.ctrl = c.dial(c.cookie)
	c.start(tcpParams)
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	if _, err := s.Write(make([]byte, 700)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "700 bytes counted", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active != nil && ts.active.progress() == 700
	})
	c.finish(700)
	// Full: the hog's 3 and the second peer's silent one; a third peer
	// takes the hog's oldest slot.
	c.dial(nil)
	third := &fakeClient{t: t, ts: ts, local: "127.0.0.3"}
	third.dial(nil)
	silent[0].SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the hog's oldest connection was not closed")
	}
	waitFor(t, "one eviction and the test completed", func() bool { st := ts.Stats(); return st.Evicted == 1 && st.Completed == 1 })
	if st := ts.Stats(); st.Overloaded != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBidirStreamsBounded: with --bidir a test holds two data streams per
// -P (the stock client opens -P on which it sends and -P on which it
// receives), and MaxStreams bounds the streams a test holds, not -P: each
// stream is one of the places in the firmware's memory budget
// (firmware/app/budget.go). At the limit (-P 2 --bidir, 4 streams of 4)
// the test runs; past it (-P 3 --bidir, 6 streams) it is refused as an
// over-large -P is, with IENUMSTREAMS, and counted in BadParams.
func TestBidirStreamsBounded(t *testing.T) {
	ts := startServer(t, Config{MaxStreams: 4})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 1, "parallel": 2, "bidirectional": true, "len": 1000})
	var streams []net.Conn
	for range 4 {
		streams = append(streams, c.tcpStream())
	}
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	// The client sends on its first -P streams and receives on the rest.
	for _, s := range streams[:2] {
		if _, err := s.Write(make([]byte, 200)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range streams[2:] {
		s.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.ReadFull(s, make([]byte, 1000)); err != nil {
			t.Fatalf("the server does not send on a receiving stream: %v", err)
		}
	}
	waitFor(t, "400 bytes received", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		var n uint64
		for _, st := range ts.active.streams {
			if !st.sender {
				n += st.bytes.Load()
			}
		}
		return n == 400
	})
	if r := c.finish(400); len(r.Streams) != 4 {
		t.Fatalf("server results for %d streams, want 4: %+v", len(r.Streams), r)
	}
	ts.idle(t)
	if st := ts.Stats(); st.Completed != 1 || st.Aborted != 0 || !st.Last.Bidir || st.Last.Streams != 2 ||
		st.Last.BytesReceived != 400 || st.Last.BytesSent == 0 {
		t.Fatalf("after -P 2 --bidir: stats %+v, last %+v", st, *st.Last)
	}

	// Past the limit: refused before CREATE_STREAMS, no stream opened.
	c = dialFake(t, ts)
	c.expect(stateParamExchange)
	c.sendJSON(map[string]any{"tcp": true, "time": 1, "parallel": 3, "bidirectional": true, "len": 1000})
	c.expectError(ieNumStreams)
	settle(t, ts, "BadParams", func(s Stats) uint64 { return s.BadParams }, 1)
	if st := ts.Stats(); !strings.Contains(st.LastError, "6 streams") || st.Aborted != 1 {
		t.Errorf("after -P 3 --bidir: stats %+v", st)
	}
	fullTCP(t, ts)
}

// TestTricklingTestEnded: a test bounded by bytes (-n) rather than time
// has no -t to end it, and a client that trickles its bytes (one every
// 50 ms, well inside IdleTimeout) kept the only test slot for as long as
// it liked while every other client was told the server is busy. Every
// test now ends MaxDuration + Grace after TEST_START however its bytes
// arrive (counted in Timeouts), a -O plus -t longer than MaxDuration is
// refused up front, and the next client is served.
func TestTricklingTestEnded(t *testing.T) {
	// The trickle (a byte every 50 ms) keeps the idle watchdog (1 s) from
	// ending the test; only the deadline (2 s + 1 s) can.
	ts := startServer(t, Config{MaxDuration: 2 * time.Second, Grace: time.Second, IdleTimeout: time.Second})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "num": 1 << 20, "parallel": 1, "len": 1000})
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	stop := make(chan struct{})
	trickled := make(chan int, 1)
	go func() {
		n := 0
		defer func() { trickled <- n }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := s.Write([]byte{0x5a}); err != nil {
				return
			}
			n++
		}
	}()
	// While it trickles, the slot is taken.
	other := dialFake(t, ts)
	other.expect(stateAccessDenied)
	c.expectError(ieNoMsg)
	close(stop)
	n := <-trickled
	settle(t, ts, "Timeouts", func(s Stats) uint64 { return s.Timeouts }, 1)
	if st := ts.Stats(); !strings.Contains(st.LastError, "no TEST_END 1s after the longest test, 2s") {
		t.Fatalf("ended for another reason than the deadline: stats %+v", st)
	}
	t.Logf("trickled %d bytes before the server ended the test", n)

	// -O 1 -t 2 is longer than MaxDuration: refused before any stream.
	c = dialFake(t, ts)
	c.expect(stateParamExchange)
	c.sendJSON(map[string]any{"tcp": true, "time": 2, "omit": 1, "parallel": 1})
	c.expectError(ieDuration)
	settle(t, ts, "BadParams", func(s Stats) uint64 { return s.BadParams }, 1)

	// A well-behaved client is served.
	fullTCP(t, ts)
	if st := ts.Stats(); st.Completed != 1 || st.Aborted != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamOutlivesHandshakeTimeout: a TCP stream keeps being read after
// HandshakeTimeout. The read deadline set for its cookie was never
// cleared, so a receiving stream stopped being read HandshakeTimeout
// (10 s by default) after it connected: a forward test longer than that
// counted only its first seconds, or was ended as idle.
func TestStreamOutlivesHandshakeTimeout(t *testing.T) {
	ts := startServer(t, Config{HandshakeTimeout: 300 * time.Millisecond, IdleTimeout: 5 * time.Second})
	c := dialFake(t, ts)
	c.start(map[string]any{"tcp": true, "time": 5, "parallel": 1, "len": 1000})
	s := c.tcpStream()
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	time.Sleep(time.Second) // past HandshakeTimeout since the stream's cookie
	if _, err := s.Write(make([]byte, 900)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "900 bytes counted after HandshakeTimeout", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active != nil && ts.active.progress() == 900
	})
	if r := c.finish(900); r.Streams[0].Bytes != 900 {
		t.Fatalf("server results %+v", r)
	}
	ts.idle(t)
}
