package netstack_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/internal/stacktest"
)

// channelPair joins two gVisor stacks with gVisor's own channel link
// endpoints (no Ethernet, no driver, no endpoint of ours): the reference
// for what gVisor does by itself.
//
// drop, if given, is asked about every packet (an IPv4 packet, from 0 = a)
// and drops it when it returns true.
func channelPair(t testing.TB, drop ...func(from int, pkt []byte) bool) (a, b *host) {
	mk := func(i byte) (*host, *channel.Endpoint) {
		ch := channel.New(1024, 1500, "")
		st := stacktest.New(t, ch, i, stacktest.Options{IPv4Only: true})
		h := &host{st: st, s: st.S, v4: st.V4}
		st.Diag = h.diag
		return h, ch
	}
	a, ca := mk(1)
	b, cb := mk(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	pump := func(i int, from, to *channel.Endpoint) {
		defer func() { done <- struct{}{} }()
		for {
			p := from.ReadContext(ctx)
			if p == nil {
				return
			}
			v := p.ToView()
			p.DecRef()
			if len(drop) > 0 && drop[0](i, v.AsSlice()) {
				v.Release()
				continue
			}
			q := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(v)})
			to.InjectInbound(ipv4.ProtocolNumber, q)
			q.DecRef()
		}
	}
	go pump(0, ca, cb)
	go pump(1, cb, ca)
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		a.st.Close()
		b.st.Close()
	})
	return a, b
}

var gvisorRepro = flag.Bool("gvisor-repro", false, "run the reproducers of gVisor's own behaviour (slow)")

// TestGVisorSmallWritesCrawlWithoutNagle is the reproducer for issue 10's
// small-write stall, on gVisor's own channel endpoints: no Ethernet, no
// driver, no endpoint of ours, a lossless link. An application writes 64
// bytes at a time to a receiver that starts reading late, so the writes
// queue behind a closed window. With Nagle's algorithm off (gVisor's
// default) each write is a segment. gVisor's receiver charges each
// segment's memory (its bookkeeping, the packet buffer, the data chunk:
// several hundred bytes) against the receive buffer, while the window it
// advertised counts payload bytes; once the charge passes the buffer size
// the segment queue drops in-window segments (SegmentQueueDropped, an
// endpoint statistic; the stack's DroppedPackets counts others).
//
// The drops alone do not make the crawl: with SACK off (the firmware's
// stack, issue 17) the sender goes back to the first hole on a timeout and
// re-sends everything after it, and the transfer finishes. With SACK on
// (gVisor's default) its recovery, after a timeout, sends one or two
// segments per timeout while the dropped flight still counts as in the
// pipe (TestGVisorTailLossCrawlsWithSACK), and the transfer crawls. With
// Nagle's algorithm on (TCPDelayEnabled) the writes coalesce into full
// segments and nothing is dropped, whatever SACK says. The firmware's
// stack has both: SACK off and Nagle on.
//
// It takes up to about half a minute and depends on gVisor's timing, so it
// runs only with -gvisor-repro.
func TestGVisorSmallWritesCrawlWithoutNagle(t *testing.T) {
	if !*gvisorRepro {
		t.Skip("reproducer of gVisor behaviour: run with -gvisor-repro")
	}
	// run is one 3 MiB transfer; it reports whether it crawled (did not
	// finish in 8 s, or took 20 retransmission timeouts or more) and
	// whether it failed otherwise.
	run := func(nagle, sack bool) (crawled bool, err error, timeouts uint64) {
		a, b := channelPair(t)
		for _, h := range []*host{a, b} {
			opt := tcpip.TCPSACKEnabled(sack)
			if err := h.s.SetTransportProtocolOption(tcp.ProtocolNumber, &opt); err != nil {
				t.Fatal(err)
			}
		}
		if nagle {
			opt := tcpip.TCPDelayEnabled(true)
			a.s.SetTransportProtocolOption(tcp.ProtocolNumber, &opt)
		}
		start := time.Now()
		err = transferWith(t, a, b, false, 5001, 3<<20, xfer{write: 64, hold: 1 << 20, timeout: 8 * time.Second})
		ts := a.s.Stats().TCP
		timeouts = ts.Timeouts.Value()
		t.Logf("nagle %v, sack %v: %v after %v; sender: %d segments, %d retransmits, %d timeouts; receiver's stack dropped %d",
			nagle, sack, err, time.Since(start).Round(time.Millisecond), ts.SegmentsSent.Value(), ts.Retransmits.Value(), timeouts, b.s.Stats().DroppedPackets.Value())
		return err != nil || timeouts >= 20, err, timeouts
	}
	// Without Nagle and with SACK the crawl depends on where the drops
	// fall: it came in two of three runs here. Up to four tries.
	crawls := 0
	for try := 0; try < 4 && crawls == 0; try++ {
		if c, _, _ := run(false, true); c {
			crawls++
		}
	}
	if crawls == 0 {
		t.Errorf("without Nagle, with SACK: no crawl in 4 runs: gVisor's receive accounting or SACK recovery may have changed")
	}
	for _, c := range []struct{ nagle, sack bool }{{false, false}, {true, true}, {true, false}} {
		if crawled, err, timeouts := run(c.nagle, c.sack); crawled {
			t.Errorf("nagle %v, sack %v: %v after %d timeouts", c.nagle, c.sack, err, timeouts)
		}
	}
}
