package app

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// tcpStates counts the server stack's TCP endpoints on local port port
// by state (the listener included), and the bytes they hold queued to
// send.
func tcpStates(s *stack.Stack, port uint16) (map[tcp.EndpointState]int, int) {
	n, queued := map[tcp.EndpointState]int{}, 0
	for _, te := range s.RegisteredEndpoints() {
		ep, ok := te.(*tcp.Endpoint)
		if !ok || ep.Info().(*stack.TransportEndpointInfo).ID.LocalPort != port {
			continue
		}
		n[ep.EndpointState()]++
		if q, err := ep.GetSockOptInt(tcpip.SendQueueSizeOption); err == nil {
			queued += q
		}
	}
	return n, queued
}

// TestGivenUpConnectionsReset: a connection the firmware gives up on (here
// the idle timeout of a source client that asked for a terabyte and never
// reads) is reset, not closed with its send buffer queued: closed
// gracefully under a zero window it stayed in the stack, holding up to
// its 1 MiB send buffer for ever, after its place was given back, so a
// peer reconnecting made the firmware hold without bound.
func TestGivenUpConnectionsReset(t *testing.T) {
	r := newLimitsRig(t, Limits{MaxConns: 4, IdleTimeout: 300 * time.Millisecond})
	crb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &crb)
	for round := range 4 {
		for range 3 { // a peer's share of 4 places
			c := r.dial(t, SourcePort)
			fmt.Fprintf(c, "%d\n", int64(1)<<40)
		}
		eventually(t, fmt.Sprintf("round %d's clients given up", round), func() bool {
			return r.srv.svc.source.active.Load() == 0 && r.srv.svc.source.idleClosed.Load() >= int64(3*(round+1))
		})
	}
	eventually(t, "no given-up connection left in the stack", func() bool {
		n, _ := tcpStates(r.srv.Stack, SourcePort)
		return len(n) == 1 && n[tcp.StateListen] == 1
	})
	if st := r.srv.closeStats(); st.Reset < 12 {
		t.Errorf("closing stats %+v: want 12 connections reset", st)
	}
}

// lingerRig is a listener of the rig's server on port 6000 (its
// connections close through the server's reaper) and a client whose
// receive buffer is 16 KiB.
func lingerRig(t *testing.T, l Limits) (*limitsRig, net.Listener) {
	r := newLimitsRig(t, l)
	crb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &crb)
	ln, err := r.srv.listenTCP(6000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return r, ln
}

// TestClosedConnectionDelivers: a connection closed with 256 KiB still
// queued, to a client that reads slowly, delivers every byte and then its
// FIN; its place is given back only once they are acknowledged, and
// nothing is reset.
func TestClosedConnectionDelivers(t *testing.T) {
	r, ln := lingerRig(t, Limits{})
	c := r.dial(t, 6000)
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	released := make(chan int64, 1)
	s.(*tcpConn).setRelease(func() { released <- read.Load() })
	const n = 4 * 64 << 10 // twice the server's 128 KiB send buffer
	go func() {
		for range n / len(Pattern) {
			if _, err := s.Write(Pattern); err != nil {
				t.Errorf("server write: %v", err)
				break
			}
		}
		s.Close()
	}()
	h := sha256.New()
	buf := make([]byte, 16<<10)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		k, err := c.Read(buf)
		h.Write(buf[:k])
		read.Add(int64(k))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("client read after %d bytes: %v", read.Load(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := sha256.New()
	io.Copy(want, PatternStream(n))
	if read.Load() != n || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatalf("client read %d bytes (SHA-256 match %v), want %d", read.Load(), bytes.Equal(h.Sum(nil), want.Sum(nil)), n)
	}
	select {
	case at := <-released:
		// Released once the FIN was acknowledged: every byte had reached
		// the client's stack, so it had read all but its window.
		if at < n-32<<10 {
			t.Errorf("place given back when the client had read %d of %d bytes", at, n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("place never given back")
	}
	if st := r.srv.closeStats(); st.Reset+st.LingerReset+st.OrphanReset != 0 {
		t.Errorf("closing stats %+v: a delivering connection was reset", st)
	}
}

// TestLingerBounded: a connection closed with bytes queued to a client
// that never reads is reset after Linger, its place given back, counted.
func TestLingerBounded(t *testing.T) {
	r, ln := lingerRig(t, Limits{Linger: 300 * time.Millisecond})
	c := r.dial(t, 6000)
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	s.(*tcpConn).setRelease(func() { close(released) })
	s.Write(Pattern) // 64 KiB into a 16 KiB window
	s.Close()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("place of a never-read closed connection not given back")
	}
	if st := r.srv.closeStats(); st.LingerReset != 1 {
		t.Errorf("closing stats %+v: want one linger reset", st)
	}
	eventually(t, "the closed connection gone from the stack", func() bool {
		n, _ := tcpStates(r.srv.Stack, 6000)
		return len(n) == 1 && n[tcp.StateListen] == 1
	})
	_ = c
}

// TestTimeWaitBounded: connections the firmware closes first end in
// TIME-WAIT, which gVisor keeps for 60 s with no bound on their number;
// a peer opening and closing source connections made the firmware hold
// one endpoint per connection for a minute. At most MaxTimeWait are kept;
// the oldest past it is reset, and counted.
func TestTimeWaitBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{MaxTimeWait: 20})
	// A bad length: the source answers and closes first.
	for i := range 100 {
		c, err := r.dialFrom(t, tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), SourcePort)
		if err != nil {
			t.Fatalf("dial %d: %v (closing %+v, source %+v)", i, err, r.srv.closeStats(), r.srv.svc.source.stats())
		}
		fmt.Fprintf(c, "x\n")
		if got := closedByServer(t, c, fmt.Sprintf("source request %d", i)); !strings.HasPrefix(got, "bad length") {
			t.Fatalf("request %d: %q", i, got)
		}
		c.Close()
		// A peer reconnecting before its place is back would meet its
		// share (the reaper gives places back within milliseconds).
		eventually(t, "the place back", func() bool { return r.srv.svc.source.active.Load() == 0 })
	}
	var n map[tcp.EndpointState]int
	eventually(t, "TIME-WAIT bounded", func() bool {
		n, _ = tcpStates(r.srv.Stack, SourcePort)
		return n[tcp.StateTimeWait] <= 20
	})
	if st := r.srv.closeStats(); st.MaxTimeWait != 20 || st.TimeWaitReset < 75 || st.TimeWait > 20 {
		t.Errorf("closing stats %+v (states %v): want the oldest (about 80) reset", st, n)
	}
}
