package netstack_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkt"
)

// mangling rewrites one IP datagram as a hostile or unusual network would
// deliver it.
type mangling struct {
	frag       int    // fragment payload size (a multiple of 8); 0: no fragmentation
	chainFront int    // IPv6 destination-options headers before the fragment header
	chain      int    // IPv6 destination-options headers after it (or anywhere, unfragmented)
	id         uint32 // fragment identification
	corrupt    bool   // flip a bit in the datagram's last payload bytes
	// IPv6 extension headers by number (extChain), before the chainFront
	// headers (unfragmented: first) and after the chain headers.
	front, inner []byte
}

// destOpts returns n destination-options headers (PadN only) chained to
// next.
func destOpts(n int, next byte) []byte {
	return extChain(bytes.Repeat([]byte{60}, n), next)
}

// extChain returns one 8-byte IPv6 extension header of each number in
// types, in order, the last chained to next: hop-by-hop and destination
// options (0, 60) hold a PadN option, a routing header (43) has no
// segments left, a fragment header (44) is atomic (offset 0, M clear), an
// experiment header (253, RFC 4727) holds a tag; 254 and 59 (no next
// header) get the same layout with zeros, though only an RFC 8200
// extension header is read that way.
func extChain(types []byte, next byte) []byte {
	var b []byte
	for i, t := range types {
		nh := next
		if i+1 < len(types) {
			nh = types[i+1]
		}
		switch t {
		case 0, 60:
			b = append(b, nh, 0, 1, 4, 0, 0, 0, 0)
		case 253:
			b = append(b, nh, 0, 0xBE, 0xEF, 0, 0, 0, 0)
		case 44:
			b = append(b, nh, 0, 0, 0, 0, 0, 0x12, 0x34)
		default:
			b = append(b, nh, 0, 0, 0, 0, 0, 0, 0)
		}
	}
	return b
}

// firstOf returns the first of types, or next if there is none.
func firstOf(types []byte, next byte) byte {
	if len(types) > 0 {
		return types[0]
	}
	return next
}

// mangle returns the frames that carry the datagram of Ethernet frame f
// (untagged IPv4 or IPv6 without extension headers) rewritten as m says.
// Header checksums stay valid; only a corrupted payload is wrong.
func mangle(f []byte, m mangling) [][]byte {
	eth := f[:14]
	var out [][]byte
	frame := func(parts ...[]byte) []byte {
		b := append([]byte(nil), eth...)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(f[16:]))
		data := append([]byte(nil), f[14+ihl:14+tot]...)
		if m.corrupt {
			data[len(data)-3] ^= 0x20
		}
		if m.frag == 0 {
			return [][]byte{frame(f[14:14+ihl], data)}
		}
		for off := 0; off < len(data); off += m.frag {
			n := min(m.frag, len(data)-off)
			ip := append([]byte(nil), f[14:14+ihl]...)
			binary.BigEndian.PutUint16(ip[2:], uint16(ihl+n))
			binary.BigEndian.PutUint16(ip[4:], uint16(m.id))
			fo := uint16(off / 8)
			if off+n < len(data) {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(ip[6:], fo)
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(ip[10:], ^pkt.Fold(pkt.Sum(0, ip)))
			out = append(out, frame(ip, data[off:off+n]))
		}
	case 0x86DD:
		plen := int(binary.BigEndian.Uint16(f[18:]))
		next := f[20]
		data := append([]byte(nil), f[54:54+plen]...)
		if m.corrupt {
			data[len(data)-3] ^= 0x20
		}
		ip := func(first byte, n int) []byte {
			h := append([]byte(nil), f[14:54]...)
			h[6] = first
			binary.BigEndian.PutUint16(h[4:], uint16(n))
			return h
		}
		ft := append(append([]byte(nil), m.front...), bytes.Repeat([]byte{60}, m.chainFront)...)
		it := append(bytes.Repeat([]byte{60}, m.chain), m.inner...)
		if m.frag == 0 {
			types := append(ft, it...)
			chain := extChain(types, next)
			return [][]byte{frame(ip(firstOf(types, next), len(chain)+len(data)), chain, data)}
		}
		fragmentable := append(extChain(it, next), data...)
		inner := firstOf(it, next)
		front := extChain(ft, 44)
		first := firstOf(ft, 44)
		for off := 0; off < len(fragmentable); off += m.frag {
			n := min(m.frag, len(fragmentable)-off)
			fh := []byte{inner, 0, 0, 0, 0, 0, 0, 0}
			v := uint16(off)
			if off+n < len(fragmentable) {
				v |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], v)
			binary.BigEndian.PutUint32(fh[4:], m.id)
			out = append(out, frame(ip(first, len(front)+8+n), front, fh, fragmentable[off:off+n]))
		}
	}
	return out
}

// l4 locates the transport header and payload of an unmangled frame from
// gVisor (untagged, no IP options or extension headers).
func l4(f []byte) (proto int, hdr, payload []byte) {
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(f[16:]))
		if binary.BigEndian.Uint16(f[20:])&0x3FFF != 0 || tot > len(f)-14 {
			return 0, nil, nil // already a fragment
		}
		proto, hdr = int(f[23]), f[14+ihl:14+tot]
	case 0x86DD:
		plen := int(binary.BigEndian.Uint16(f[18:]))
		proto, hdr = int(f[20]), f[54:54+plen]
	default:
		return 0, nil, nil
	}
	switch {
	case proto == pkt.ProtoTCP && len(hdr) >= 20:
		return proto, hdr, hdr[int(hdr[12]>>4)*4:]
	case proto == pkt.ProtoUDP && len(hdr) >= 8:
		return proto, hdr, hdr[8:]
	}
	return 0, nil, nil
}

// injector replaces frames on the wire with mangled ones, delivered in
// order by one goroutine (a wire filter must not call into a model).
type injector struct {
	to *fectest.Model
	q  chan [][]byte
	wg sync.WaitGroup
}

func newInjector(t *testing.T, to *fectest.Model) *injector {
	in := &injector{to: to, q: make(chan [][]byte, 1024)}
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		for fs := range in.q {
			for _, f := range fs {
				in.to.Deliver(f, fectest.RxOK)
			}
		}
	}()
	t.Cleanup(func() { close(in.q); in.wg.Wait() })
	return in
}

// TCP segments that reach the receiver as IP fragments (IPv4, and IPv6
// with nine destination-options headers on either side of the fragment
// header; over IPv6 every fourth such segment instead unfragmented behind
// nine destination-options headers), some with a flipped payload bit in
// the last bytes. In every
// mode the stream must arrive intact: no corrupted segment may be
// delivered (with RX offload advertised, GRO mode, the MAC cannot check a
// fragment and gVisor would trust it), and the intact fragmented ones must
// be (or the transfer could not finish: every third data segment, its
// retransmissions included, is fragmented).
func TestCorruptedFragmentedTCPIsNeverDelivered(t *testing.T) {
	for _, m := range modes {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
				in := newInjector(t, b.rig.Model)
				var mu sync.Mutex
				corrupted := map[uint32]bool{}
				var seen, nBad, nGood atomic.Int64
				var id atomic.Uint32
				w.SetFilter(func(from int, f []byte) fectest.Action {
					if from != 0 {
						return fectest.Pass
					}
					proto, hdr, payload := l4(f)
					if proto != pkt.ProtoTCP || len(payload) == 0 {
						return fectest.Pass
					}
					if seen.Add(1)%3 != 0 {
						return fectest.Pass
					}
					seq := binary.BigEndian.Uint32(hdr[4:])
					mg := mangling{frag: 512, id: id.Add(1)}
					if v6 {
						mg.chainFront, mg.chain = 9, 9
						if seen.Load()%4 == 0 {
							// Unfragmented behind nine destination-options
							// headers: past the hardware's header parsing.
							mg = mangling{chain: 9}
						}
					}
					mu.Lock()
					if !corrupted[seq] && len(corrupted) < 40 && seen.Load()%2 == 0 {
						corrupted[seq] = true
						mg.corrupt = true
					}
					mu.Unlock()
					if mg.corrupt {
						nBad.Add(1)
					} else {
						nGood.Add(1)
					}
					in.q <- mangle(f, mg)
					return fectest.Drop
				})
				if err := transfer(t, a, b, v6, 5001, 1<<20); err != nil {
					t.Fatalf("%v (a %+v, b %+v)", err, a.ep.Stats(), b.ep.Stats())
				}
				if nBad.Load() == 0 || nGood.Load() == 0 {
					t.Fatalf("%d corrupted and %d intact fragmented segments: the test shows nothing", nBad.Load(), nGood.Load())
				}
				t.Logf("%d corrupted and %d intact segments sent as fragments; b %+v", nBad.Load(), nGood.Load(), b.ep.Stats())
				drained(t, a, b)
			})
		}
	}
}

// UDP datagrams rewritten on the wire: IPv4 fragments; IPv6 behind nine
// destination-options headers, unfragmented; IPv6 fragments with nine
// such headers on either side of the fragment header. A corrupted one
// must never be echoed, in any mode; an intact one must be.
func TestCorruptedUDPIsNeverDeliveredWhateverItsLayout(t *testing.T) {
	for _, m := range modes {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
				in := newInjector(t, b.rig.Model)
				echo(t, b, v6, 7)
				c := udpClient(t, a, b, v6, 7)
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
				layouts := []mangling{{frag: 64}}
				if v6 {
					layouts = []mangling{{frag: 128}, {chain: 9}, {frag: 128, chainFront: 9, chain: 9}}
				}
				var layout atomic.Int64
				var id atomic.Uint32
				w.SetFilter(func(from int, f []byte) fectest.Action {
					proto, _, payload := l4(f)
					if from != 0 || proto != pkt.ProtoUDP {
						return fectest.Pass
					}
					bad := bytes.HasPrefix(payload, []byte("BAD"))
					if !bad && !bytes.HasPrefix(payload, []byte("GOOD")) {
						return fectest.Pass
					}
					mg := layouts[layout.Load()]
					mg.id, mg.corrupt = id.Add(1), bad
					in.q <- mangle(f, mg)
					return fectest.Drop
				})
				for i, l := range layouts {
					layout.Store(int64(i))
					for k := 0; k < 3; k++ {
						bad := append([]byte("BAD"), bytes.Repeat([]byte{byte('a' + k)}, 300)...)
						c.Write(bad)
						c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
						if n, err := c.Read(buf); err == nil {
							t.Fatalf("layout %+v: a corrupted datagram was delivered and echoed (%q...)", l, buf[:min(n, 8)])
						}
						good := append([]byte("GOOD"), bytes.Repeat([]byte{byte('a' + k)}, 300)...)
						c.Write(good)
						c.SetReadDeadline(time.Now().Add(2 * time.Second))
						if n, err := c.Read(buf); err != nil || !bytes.Equal(buf[:n], good) {
							t.Fatalf("layout %+v: an intact datagram was not echoed: %v (b %+v)", l, err, b.ep.Stats())
						}
					}
				}
				drained(t, a, b)
			})
		}
	}
}
