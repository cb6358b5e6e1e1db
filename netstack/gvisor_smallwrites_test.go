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
// driver, no endpoint of ours, a lossless link. An application writing 64
// bytes at a time, with Nagle's algorithm off (gVisor's default), gets one
// 64-byte segment per write. gVisor's receiver charges each segment's
// memory (its bookkeeping, the packet buffer, the data chunk: several
// hundred bytes) against the receive buffer, while the window it
// advertised counts payload bytes; once the charge passes the buffer size
// the segment queue drops arriving segments (stack DroppedPackets,
// SegmentQueueDropped), and the sender recovers on retransmission
// timeouts: 3 MiB take minutes. With Nagle's algorithm on (the stack
// option TCPDelayEnabled) the writes coalesce into full segments and
// nothing is dropped.
//
// It takes about ten seconds and depends on gVisor's timing, so it runs
// only with -gvisor-repro.
func TestGVisorSmallWritesCrawlWithoutNagle(t *testing.T) {
	if !*gvisorRepro {
		t.Skip("reproducer of gVisor behaviour: run with -gvisor-repro")
	}
	for _, nagle := range []bool{false, true} {
		a, b := channelPair(t)
		if nagle {
			opt := tcpip.TCPDelayEnabled(true)
			a.s.SetTransportProtocolOption(tcp.ProtocolNumber, &opt)
		}
		start := time.Now()
		err := transferWith(t, a, b, false, 5001, 3<<20, xfer{write: 64, timeout: 8 * time.Second})
		ts := a.s.Stats().TCP
		drops := b.s.Stats().DroppedPackets.Value()
		t.Logf("nagle %v: %v after %v; sender: %d segments, %d retransmits, %d timeouts; receiver dropped %d",
			nagle, err, time.Since(start).Round(time.Millisecond), ts.SegmentsSent.Value(), ts.Retransmits.Value(), ts.Timeouts.Value(), drops)
		switch {
		case nagle && (err != nil || drops != 0):
			t.Errorf("with Nagle: %v, %d segments dropped", err, drops)
		case !nagle && drops == 0:
			t.Errorf("without Nagle nothing was dropped: gVisor may have fixed its receive accounting (%v)", err)
		}
	}
}
