package netstack_test

import (
	"fmt"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// A peer MSS below 128 leaves gVisor's sender an MSS below 88 (it reserves
// 40 bytes for options), and 88 (peer MSS 88: 48) makes a 64 KiB GSO
// packet more segments than the TX ring holds. Every GSO packet of such a
// connection was refused, retransmissions included: no data flowed. Now
// everything gVisor hands over is sent, and nothing is refused.
func TestTSOWithATinyPeerMSS(t *testing.T) {
	for _, mss := range []int{88, 120, 127, 128} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("mss=%d/v6=%v", mss, v6), func(t *testing.T) {
				// At MSS 48-88 one 64 KiB GSO packet is up to 1,366 frames
				// in one burst: a 512-descriptor RX ring overruns by the
				// hundred and TCP recovery at such an MSS can take a
				// minute. Loss is not what this test is about.
				a, b, w := pair(t, hostOptions{mode: modes[5], rxRing: 4096, noTrace: true})
				wc := &wireCheck{}
				w.SetFilter(wc.filter)
				if err := transferWith(t, a, b, v6, 5001, 256<<10, xfer{mss: mss, timeout: time.Minute}); err != nil {
					_, _, nd := w.Counts()
					t.Fatalf("%v (receiver's segment queue dropped %d, RX ring overruns %v)\n== sender\n%s== receiver\n%s",
						err, b.s.Stats().DroppedPackets.Value(), nd, a.diag(), b.diag())
				}
				wc.verify(t)
				st := a.ep.Stats()
				if st.TxErrors != 0 || st.TxGSOPackets == 0 {
					t.Fatalf("%d packets refused or failed, %d GSO packets", st.TxErrors, st.TxGSOPackets)
				}
				_, _, nd := w.Counts()
				t.Logf("a: %d GSO packets, %d sent in pieces, cut short %d; %d TCP timeouts; receiver's segment queue dropped %d, RX ring overruns %v",
					st.TxGSOPackets, st.TxSplitPieces, st.TxCutShort, a.s.Stats().TCP.Timeouts.Value(), b.s.Stats().DroppedPackets.Value(), nd)
				drained(t, a, b)
			})
		}
	}
}

// Many 64-byte writes queued behind a closed receive window: gVisor merges
// them into GSO packets of hundreds of views, more descriptors than the
// ring has. They were refused as too long, never sent, and the connection
// crawled on retransmission timeouts. Now they are gathered and sent.
//
// The sender runs with Nagle's algorithm (TCPDelayEnabled): without it
// gVisor sends every write as its own 64-byte segment, and its receiver,
// which charges each segment's bookkeeping (hundreds of bytes) to the
// receive buffer while advertising the window in payload bytes, drops
// them and the transfer crawls on timeouts whatever the link does
// (TestGVisorSmallWritesCrawlWithoutNagle shows it on gVisor's own
// channel endpoints).
//
// Plain sg (no GSO) runs it too: the "small-write stall without TSO" was
// that gVisor behaviour, and Nagle's algorithm is what avoids it.
func TestManySmallWritesBehindAClosedWindow(t *testing.T) {
	for _, m := range []mode{modes[1], modes[2], modes[5]} {
		t.Run(m.name, func(t *testing.T) {
			a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
			nagle := tcpip.TCPDelayEnabled(true)
			a.s.SetTransportProtocolOption(tcp.ProtocolNumber, &nagle)
			wc := &wireCheck{}
			w.SetFilter(wc.filter)
			x := xfer{write: 64, hold: 1536 << 10, timeout: time.Minute}
			if err := transferWith(t, a, b, false, 5001, 3<<20, x); err != nil {
				t.Fatalf("%v\n== sender\n%s== receiver\n%s", err, a.diag(), b.diag())
			}
			wc.verify(t)
			st := a.ep.Stats()
			if st.TxErrors != 0 {
				t.Fatalf("%d packets refused or failed", st.TxErrors)
			}
			if m.tso && st.TxGathered == 0 {
				t.Fatal("no GSO packet had too many views: the test shows nothing")
			}
			t.Logf("a: %d GSO packets, %d pieces, %d gathered", st.TxGSOPackets, st.TxSplitPieces, st.TxGathered)
			drained(t, a, b)
		})
	}
}
