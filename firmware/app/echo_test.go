package app

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// echoFrom opens a UDP socket on the client stack from port (0: any) to
// the server's echo port.
func (r *limitsRig) echoFrom(t *testing.T, port uint16) *gonet.UDPConn {
	t.Helper()
	c, err := gonet.DialUDP(r.client, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), Port: port},
		&tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: EchoPort}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("UDP from port %d: %v", port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends d on c and waits (10 s at most) for the echo.
func roundTrip(t *testing.T, c *gonet.UDPConn, d []byte) {
	t.Helper()
	if _, err := c.Write(d); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], d) {
		t.Fatalf("echo of %q: %q, %v", d, buf[:n], err)
	}
}

// nothingQueued reports whether c has no datagram waiting. gonet checks
// an expired deadline before the queue, so the deadline is set a little
// ahead: a queued datagram is read at once, and only the empty case
// waits for it.
func nothingQueued(c *gonet.UDPConn) bool {
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := c.Read(make([]byte, 2048))
	return err != nil
}

// TestEchoRefusesDatagramServicePorts: a datagram whose source is the port
// of a service that answers datagrams (another echo, chargen, DHCP,
// iperf3, ...) gets no answer, so one spoofed datagram cannot bounce
// between two boards for ever; it is counted. Any other port is answered.
func TestEchoRefusesDatagramServicePorts(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	good := r.echoFrom(t, 0)
	for i, port := range []uint16{7, 13, 17, 19, 37, 67, 68, IperfPort} {
		bad := r.echoFrom(t, port)
		if _, err := bad.Write([]byte("loop?")); err != nil {
			t.Fatal(err)
		}
		// The service reads in order: once the next datagram's echo is
		// back, any answer to this one would be queued already (the pipe
		// delivers in the writer's goroutine).
		roundTrip(t, good, []byte(fmt.Sprintf("after %d", port)))
		if !nothingQueued(bad) {
			t.Fatalf("datagram from port %d was answered", port)
		}
		if st := r.srv.svc.echo.stats(true); st.RefusedPort != int64(i+1) {
			t.Fatalf("after port %d: stats %+v, want %d refused", port, st, i+1)
		}
	}
	var st Stats
	getJSON(t, r, "/stats", &st)
	if st.Limits.Echo.RefusedPort != 8 || st.Limits.Echo.Answered != 8 || st.Limits.Echo.Rate != DefaultLimits.EchoRate {
		t.Fatalf("/stats limits.echo %+v", st.Limits.Echo)
	}
}

// TestEchoRateLimitedPerPeer: with the limiter's clock stopped, one peer
// gets exactly EchoBurst answers and the rest are counted; another peer
// is still answered; once time moves on, the first is answered again.
func TestEchoRateLimitedPerPeer(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newLimitsRigWith(t, Limits{EchoRate: 10, EchoBurst: 5}, func(s *Server) { s.echoNow = clock })
	hog := r.echoFrom(t, 0)
	for i := range 5 {
		roundTrip(t, hog, []byte{byte(i)})
	}
	for i := range 20 {
		if _, err := hog.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "20 datagrams over the burst counted", func() bool { return r.srv.svc.echo.stats(true).RateLimited == 20 })
	if !nothingQueued(hog) {
		t.Fatal("a datagram over the burst was answered")
	}
	// A second peer (another source address) is served.
	oc, err := gonet.DialUDP(r.client, &tcpip.FullAddress{NIC: 1, Addr: r.peer(t, 1)}, &tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: EchoPort}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	roundTrip(t, oc, []byte("second peer"))
	// Half a second later the first peer has 5 tokens again.
	mu.Lock()
	now = now.Add(500 * time.Millisecond)
	mu.Unlock()
	roundTrip(t, hog, []byte("again"))
	if st := r.srv.svc.echo.stats(true); st.Answered != 7 || st.RateLimited != 20 || st.Peers != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEchoPeerTableBounded: a spoofer using more source addresses than
// the table holds gets no fresh budget for each: while every tracked
// peer is still limited, a new one is refused.
func TestEchoPeerTableBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	e := newEchoService(1, 1, func() time.Time { return now })
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range echoMaxPeers {
		if !e.allow(addr(i)) {
			t.Fatalf("peer %d refused its first datagram", i)
		}
	}
	if e.allow(addr(echoMaxPeers)) {
		t.Fatal("a peer past the table's bound was answered while every other was limited")
	}
	now = now.Add(time.Second) // every bucket refilled: their room is reused
	if !e.allow(addr(echoMaxPeers)) || len(e.peers) > echoMaxPeers {
		t.Fatalf("new peer refused after the others refilled (%d peers)", len(e.peers))
	}
}

// TestEchoLimitCountsFrames: the echo's limit is in full-size frames, not
// datagrams: a datagram of 8192 bytes leaves in 6 IPv4 fragments and
// costs 6 tokens, so a burst of 12 answers two of them. Counted in
// datagrams, the limit let one peer make the board reflect 64 KiB
// datagrams at EchoRate a second (64 MB/s at the default 1000).
func TestEchoLimitCountsFrames(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	r := newLimitsRigWith(t, Limits{EchoRate: 10, EchoBurst: 12}, func(s *Server) { s.echoNow = clock })
	c := r.echoFrom(t, 0)
	big := bytes.Repeat([]byte{0xa5}, 8192)
	buf := make([]byte, 1<<16)
	for i := range 2 {
		if _, err := c.Write(big); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(buf); err != nil || !bytes.Equal(buf[:n], big) {
			t.Fatalf("datagram %d of 8192 bytes: %d bytes back, %v", i, n, err)
		}
	}
	if _, err := c.Write(big); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the third 8192-byte datagram limited", func() bool { return r.srv.svc.echo.stats(true).RateLimited == 1 })
	if !nothingQueued(c) {
		t.Fatal("a third 8192-byte datagram was answered within a burst of 12 frames")
	}
	if got := echoFrames(65507); got > DefaultLimits.EchoBurst {
		t.Errorf("the largest datagram costs %d frames, more than the default burst %d: it could never be answered", got, DefaultLimits.EchoBurst)
	}
}
