package app

import (
	"encoding/json"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// echoServerConn returns the server's side of the TCP echo's only place.
func echoServerConn(t *testing.T, r *limitsRig) *tcpConn {
	t.Helper()
	sv := &r.srv.svc.tcpEcho
	var c *tcpConn
	eventually(t, "one TCP echo place", func() bool {
		sv.mu.Lock()
		defer sv.mu.Unlock()
		for pl := range sv.places {
			c, _ = pl.conn.(*tcpConn)
		}
		return len(sv.places) == 1 && c != nil
	})
	return c
}

// TestReviewTCPEchoReceiveBufferBounded: Budget counts each echo place at
// echoBufferSize (16 KiB) of receive buffer, set on the listener. gVisor
// copies it into an accepted endpoint with notify=false (accept.go,
// createConnectingEndpoint: SetReceiveBufferSize(l.rcvWnd, false)), so
// OnSetReceiveBufferSize never sets RcvAutoParams.Disabled, and the
// stack's TCP protocol moderates receive buffers by default
// (moderateReceiveBuffer: true). The echo copies out everything it
// receives, so ModerateRecvBuf grows its buffer towards the stack's
// maximum (TCPReceiveBufferSize, 512 KiB). A peer that sends fast while
// reading, then stops reading and keeps sending, makes the place hold that
// much unread, past the budget's 16 KiB.
func TestReviewTCPEchoReceiveBufferBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	c := r.dial(t, EchoPort)
	s := echoServerConn(t, r)
	var reading atomic.Bool
	reading.Store(true)
	go func() {
		b := make([]byte, 64<<10)
		for reading.Load() {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			c.Read(b)
		}
	}()
	go func() {
		b := make([]byte, 64<<10)
		for {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	time.Sleep(2 * time.Second) // a fast exchange: the server copies out
	reading.Store(false)
	time.Sleep(2 * time.Second) // the client stops reading, keeps sending
	sz := s.ep.SocketOptions().GetReceiveBufferSize()
	q, terr := s.ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	if terr != nil {
		t.Fatal(terr)
	}
	if sz > echoBufferSize || q > echoBufferSize {
		t.Fatalf("TCP echo connection: receive buffer %d KiB, %d KiB held unread; Budget counts %d KiB",
			sz>>10, q>>10, echoBufferSize>>10)
	}
}

// statsBody returns GET /stats's body.
func statsBody(t *testing.T, r *limitsRig) []byte {
	t.Helper()
	resp, err := r.httpClient().Get("http://board/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReviewStatsBusyHistBounded: the busy histograms are 16 KiB each in
// fixedBuffers, but /stats renders every non-empty bucket of both as a
// map[string]uint32 and JSON, under the histogram's lock. They are
// cumulative since boot, never reset: after enough answers of varied cost
// (any peer's traffic in between varies it) most of the 4096 buckets are
// non-empty, and each GET /stats (open to anyone, HTTPMaxConns of them at
// once, each held for WriteTimeout by a peer that does not read) then
// builds two 4096-entry maps and a JSON body of ~100 KiB, where Budget
// gives an HTTP place 8 KiB beyond its headers and TCP buffers.
func TestReviewStatsBusyHistBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	base := len(statsBody(t, r))
	for _, h := range []*busyHist{&r.srv.svc.echo.busy, &r.srv.svc.tcpEchoBusy} {
		h.mu.Lock()
		for i := range h.counts {
			h.counts[i] = 1<<32 - 1 // a long uptime's counts
		}
		h.mu.Unlock()
	}
	full := len(statsBody(t, r))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	st := r.srv.limitStats(false) // what GET /stats renders without the token
	b, _ := json.Marshal(st)
	runtime.ReadMemStats(&ms1)
	alloc := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("/stats %d bytes before, %d with full histograms; limitStats+Marshal allocates %d KiB (JSON %d KiB)",
		base, full, alloc>>10, len(b)>>10)
	if grow := full - base; grow > 8<<10 {
		t.Fatalf("/stats grew by %d KiB with the busy histograms full (%d KiB allocated per request); Budget gives an HTTP place 8 KiB for its answer",
			grow>>10, alloc>>10)
	}
}

// TestReviewCloseWakesBlockedWrite: Close now clears the connection's
// deadlines before closing. A Close from another goroutine (an eviction,
// iperf3 ending a test) while a Write is blocked on a peer that does not
// read must still end that Write: if the endpoint's Close did not wake it,
// the cleared deadline would leave the writer blocked for ever. Both
// paths: given up (Abort) and not (the reaper's linger).
func TestReviewCloseWakesBlockedWrite(t *testing.T) {
	for _, gu := range []bool{false, true} {
		r := newLimitsRig(t, Limits{})
		ln, err := r.srv.listenTCPBuf(6001, 0, 16<<10)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		r.dial(t, 6001) // never reads
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			s.SetWriteDeadline(time.Now().Add(3 * time.Second))
			b := make([]byte, 64<<10)
			for {
				if _, err := s.Write(b); err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(500 * time.Millisecond) // blocked on the closed window
		start := time.Now()
		if gu {
			giveUp(s)
		}
		s.Close()
		select {
		case err := <-done:
			t.Logf("given up %v: Write ended after %v: %v", gu, time.Since(start), err)
			if time.Since(start) > time.Second {
				t.Errorf("given up %v: Write ended only after %v (its old deadline), not at Close", gu, time.Since(start))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("given up %v: a Write blocked when Close cleared its deadline never ended", gu)
		}
	}
}

// TestReviewTCPEchoLifetimeEndsSlowReader: a peer that reads its echo
// slowly (1 KiB every 20 ms) keeps every write of the echo short of
// the idle timeout, and the echo is mostly blocked in Write: the lifetime
// still ends the connection on time (the write deadline is the lifetime's
// when it is nearer), counted as expired, not idle.
func TestReviewTCPEchoLifetimeEndsSlowReader(t *testing.T) {
	r := newLimitsRig(t, Limits{IdleTimeout: 1500 * time.Millisecond, EchoLifetime: 2500 * time.Millisecond})
	// The client's own buffers small, so that the echo's writes block.
	crb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	if err := r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &crb); err != nil {
		t.Fatal(err)
	}
	c := r.dial(t, EchoPort)
	start := time.Now()
	go func() {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		c.Write(make([]byte, 1<<20))
	}()
	b := make([]byte, 1024)
	var got int
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(c, b)
		got += n
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := time.Since(start)
	t.Logf("closed after %v, %d KiB echoed; tcp_echo %+v", d, got>>10, r.srv.svc.tcpEcho.stats())
	if d > 3500*time.Millisecond || d < 2400*time.Millisecond {
		t.Fatalf("a slow reader's echo closed after %v; lifetime 2.5 s", d)
	}
	eventually(t, "the expiry counted", func() bool { return r.srv.svc.tcpEcho.expired.Load() == 1 })
}

// TestReviewTCPEchoTwoPlacesShared: at Split's floor of 2 echo places
// (peerMax 2: one peer may take both), a second peer is still served, by
// evicting the first peer's oldest, and the first cannot take it back.
func TestReviewTCPEchoTwoPlacesShared(t *testing.T) {
	r := newLimitsRig(t, Limits{EchoMaxConns: 2})
	hog := r.peer(t, 1)
	var hogs []net.Conn
	for i := range 2 {
		c, err := r.dialFrom(t, hog, EchoPort)
		if err != nil {
			t.Fatalf("hog connection %d: %v", i, err)
		}
		tcpRoundTrip(t, c, []byte("hog"))
		hogs = append(hogs, c)
	}
	other := r.dial(t, EchoPort)
	tcpRoundTrip(t, other, []byte("second peer"))
	closedByServer(t, hogs[0], "the hog's oldest")
	again, err := r.dialFrom(t, hog, EchoPort)
	if err != nil {
		t.Fatal(err)
	}
	closedByServer(t, again, "the hog's reconnection")
	tcpRoundTrip(t, other, []byte("still served"))
	tcpRoundTrip(t, hogs[1], []byte("hog still served"))
	if st := r.srv.svc.tcpEcho.stats(); st.Evicted != 1 || st.Refused != 1 || st.Active != 2 {
		t.Fatalf("tcp_echo %+v", st)
	}
}
