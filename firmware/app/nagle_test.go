package app

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// stackPair is two firmware stacks (NewStack, 10.0.0.1 and 10.0.0.2) on
// a pipe, the second's link endpoint wrapped by wrap when set, a listener
// on the first's port 5001, and dial, which connects the second to it
// (its connection has a 1-minute deadline). All close when t ends.
func stackPair(t *testing.T, wrap func(stack.LinkEndpoint) stack.LinkEndpoint) (s2 *stack.Stack, l *gonet.TCPListener, dial func() *gonet.TCPConn) {
	t.Helper()
	a, b := netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("10.0.0.2/24")
	m1, m2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	e1, e2 := pipe.New(tcpip.LinkAddress(m1[:]), tcpip.LinkAddress(m2[:]), 1500)
	var ep2 stack.LinkEndpoint = e2
	if wrap != nil {
		ep2 = wrap(e2)
	}
	s1, err := NewStack(e1, m1, a, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s1.Close)
	s2, err = NewStack(ep2, m2, b, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	to := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(a.Addr().As4()), Port: 5001}
	if l, err = gonet.ListenTCP(s1, to, ipv4.ProtocolNumber); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return s2, l, func() *gonet.TCPConn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := gonet.DialContextTCP(ctx, s2, to, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		return c
	}
}

// TestSmallWritesDoNotCrawl: an application on the firmware's stack
// writing 64 bytes at a time to a gVisor peer that reads late must neither
// crawl nor send tiny segments. gVisor's receiver charges each segment's
// overhead against a window it advertised in payload bytes and drops
// in-window segments when they are tiny; with SACK on, the sender then
// lives on retransmission timeouts (netstack's
// TestGVisorSmallWritesCrawlWithoutNagle, -gvisor-repro). NewStack guards
// against both halves: SACK off (the crawl: with it, recovery re-sends
// from the hole at once) and Nagle on (the drops: the writes coalesce into
// full segments). Measured here: with Nagle on about 2,300 segments
// (3,000-3,800 under -race) and 0-1 retransmits for the 3 MiB; with Nagle off 6,700-7,200 segments and
// about 1,400 retransmits of dropped segments (but no crawl, SACK being
// off). So the test asserts both: few timeouts (the crawl makes
// hundreds), and segments near full with few retransmits.
func TestSmallWritesDoNotCrawl(t *testing.T) {
	s2, l, dial := stackPair(t, nil)
	const total = 3 << 20
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		// A receiver that is late to read: the window closes and the
		// writes queue behind it.
		time.Sleep(300 * time.Millisecond)
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	c := dial()
	w := make([]byte, 64)
	for sent := 0; sent < total; sent += len(w) {
		if _, err := c.Write(w); err != nil {
			t.Fatalf("write after %d bytes: %v (sender: %d timeouts, %d retransmits)", sent, err,
				s2.Stats().TCP.Timeouts.Value(), s2.Stats().TCP.Retransmits.Value())
		}
	}
	c.Close()
	if n := <-got; n != total {
		t.Fatalf("received %d of %d bytes", n, total)
	}
	st := s2.Stats().TCP
	t.Logf("sender: %d segments, %d retransmission timeouts, %d retransmits", st.SegmentsSent.Value(), st.Timeouts.Value(), st.Retransmits.Value())
	// The closed window is probed (a timeout or two); the crawl shows as
	// hundreds of timeouts (297 before the 1-minute deadline with SACK on
	// and Nagle off, the transfer a third done).
	if st.Timeouts.Value() > 10 {
		t.Errorf("64-byte writes over a lossless link: the sender crawls on %d retransmission timeouts, %d retransmits", st.Timeouts.Value(), st.Retransmits.Value())
	}
	// Nagle's algorithm: the writes leave as near-full segments (at most
	// three times the count of 1448-byte ones; 1.0-1.8 times measured,
	// the most under -race), and the receiver drops (almost) none.
	if full := uint64(total+1447) / 1448; st.SegmentsSent.Value() > 3*full || st.Retransmits.Value() > 64 {
		t.Errorf("64-byte writes: %d segments (%d full ones would do), %d retransmits: the writes are not coalesced",
			st.SegmentsSent.Value(), full, st.Retransmits.Value())
	}
}
