package netstack_test

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkt"
)

// gvisorExtHeaders are the IPv6 header numbers gVisor's header package
// names as extension headers (pkg/tcpip/header/ipv6_extension_headers.go
// of the pinned version): hop-by-hop 0, routing 43, fragment 44, no next
// header 59, destination options 60, experiment 253 and 254 (RFC 4727).
// Its IPv6PayloadIterator walks past 0, 43, 44, 60 and 253 (that one as
// a fixed 8 bytes) to the transport header, stops at 59, and reads 254 as
// an upper-layer protocol.
var gvisorExtHeaders = []byte{0, 43, 44, 59, 60, 253, 254}

// extLayouts are the places a test puts extension header x: the whole
// datagram behind it, or fragments with it before the fragment header or
// after it (first in the fragmentable part).
func extLayouts(x byte, frag int) []mangling {
	return []mangling{{front: []byte{x}}, {frag: frag, front: []byte{x}}, {frag: frag, inner: []byte{x}}}
}

// extDelivered reports whether gVisor hands an intact datagram with
// layout m (one header of extLayouts) to UDP: whenever it walks past the
// header (it walks a reassembled datagram's fragmentable part afresh, so a
// hop-by-hop header first in it passes too); an atomic fragment header
// there is not asserted.
func extDelivered(m mangling) (yes, sure bool) {
	x := append(m.front, m.inner...)[0]
	switch {
	case x == 59 || x == 254:
		return false, true
	case x == 44 && len(m.inner) > 0:
		return false, false
	}
	return true, true
}

// A UDP datagram with a bad checksum behind each IPv6 extension header
// gVisor knows, whole and fragmented, in every mode: it must never reach
// the application. In GRO mode gVisor trusts the endpoint's checksum
// verdict for the transport header it finds behind the chain, so the
// endpoint must walk the same chain and verify what gVisor will find, or
// give no verdict. (Before: behind header 253 the endpoint's parser saw
// "protocol 253", passed the datagram up as verified, and gVisor, which
// walks 253, delivered the corrupted datagram, whole and fragmented.)
//
// Each bad datagram is followed on the wire by an intact one in the same
// layout, then by a plain sentinel, all through one injector in order:
// the echo server answers in the order it receives, so the first answer
// shows whether the bad one was delivered, with no timing involved.
func TestBadChecksumBehindAnyExtensionHeaderIsNeverDelivered(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
			in := newInjector(t, b.rig.Model)
			echo(t, b, true, 7)
			c := udpClient(t, a, b, true, 7)
			buf := make([]byte, 1<<16)
			for try := 0; ; try++ { // neighbour resolution
				c.Write([]byte("hello"))
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(buf); err == nil {
					break
				} else if try == 3 {
					t.Fatal(err)
				}
			}
			var cur atomic.Pointer[mangling]
			var id atomic.Uint32
			w.SetFilter(func(from int, f []byte) fectest.Action {
				proto, _, payload := l4(f)
				if from != 0 || proto != pkt.ProtoUDP {
					return fectest.Pass
				}
				mg := mangling{}
				switch {
				case bytes.HasPrefix(payload, []byte("BAD")):
					mg = *cur.Load()
					mg.corrupt = true
				case bytes.HasPrefix(payload, []byte("GOOD")):
					mg = *cur.Load()
				}
				mg.id = id.Add(1)
				in.q <- mangle(f, mg) // the sentinel too: one ordered path
				return fectest.Drop
			})
			for _, x := range gvisorExtHeaders {
				for i, l := range extLayouts(x, 128) {
					cur.Store(&l)
					tag := fmt.Sprintf("%d.%d", x, i)
					bad := append([]byte("BAD"+tag), bytes.Repeat([]byte{'b'}, 300)...)
					good := append([]byte("GOOD"+tag), bytes.Repeat([]byte{'g'}, 300)...)
					sentinel := []byte("SENTINEL" + tag)
					c.Write(bad)
					c.Write(good)
					c.Write(sentinel)
					var got [][]byte
					for len(got) == 0 || !bytes.Equal(got[len(got)-1], sentinel) {
						// A deadline only ends a failed test: the
						// sentinel always comes back.
						c.SetReadDeadline(time.Now().Add(30 * time.Second))
						n, err := c.Read(buf)
						if err != nil {
							t.Fatalf("header %d, layout %+v: no sentinel: %v (b %+v)", x, l, err, b.ep.Stats())
						}
						got = append(got, append([]byte(nil), buf[:n]...))
					}
					if bytes.HasPrefix(got[0], []byte("BAD")) {
						t.Fatalf("header %d, layout %+v: the corrupted datagram was delivered and echoed (b %+v)", x, l, b.ep.Stats())
					}
					yes, sure := extDelivered(l)
					if sure && yes != (len(got) == 2) {
						t.Errorf("header %d, layout %+v: intact datagram delivered %v, gVisor delivers %v (%d answers)", x, l, len(got) == 2, yes, len(got))
					}
				}
			}
			drained(t, a, b)
		})
	}
}

// The same for TCP: a corrupted copy of a data segment, behind each IPv6
// extension header gVisor knows, whole and fragmented, reaches the
// receiver just before the intact segment. Delivered, TCP would take the
// corrupted bytes and drop the intact copy as a duplicate: the stream's
// SHA-256 shows it.
func TestBadTCPChecksumBehindAnyExtensionHeaderIsNeverDelivered(t *testing.T) {
	var layouts []mangling
	for _, x := range gvisorExtHeaders {
		layouts = append(layouts, extLayouts(x, 512)...)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
			in := newInjector(t, b.rig.Model)
			var mu sync.Mutex
			seen, next := 0, 0
			w.SetFilter(func(from int, f []byte) fectest.Action {
				if from != 0 {
					return fectest.Pass
				}
				proto, _, payload := l4(f)
				if proto != pkt.ProtoTCP || len(payload) < 16 {
					return fectest.Pass
				}
				mu.Lock()
				defer mu.Unlock()
				if seen++; seen%2 != 0 || next >= 3*len(layouts) {
					return fectest.Pass
				}
				mg := layouts[next%len(layouts)]
				next++
				mg.id, mg.corrupt = uint32(next), true
				in.q <- append(mangle(f, mg), f)
				return fectest.Drop
			})
			// An MSS that leaves room for the extension header in a
			// 1518-byte frame: the MAC drops longer frames.
			if err := transferWith(t, a, b, true, 5001, 1<<20, xfer{mss: 1200}); err != nil {
				t.Fatalf("%v (b %+v)", err, b.ep.Stats())
			}
			mu.Lock()
			n := next
			mu.Unlock()
			if n < 3*len(layouts) {
				t.Fatalf("only %d of %d corrupted copies sent: the test shows nothing", n, 3*len(layouts))
			}
			if e := b.ep.Stats().RxNICErrors; e != 0 {
				t.Fatalf("the NIC dropped %d frames: the test did not show them to the endpoint", e)
			}
			drained(t, a, b)
		})
	}
}
