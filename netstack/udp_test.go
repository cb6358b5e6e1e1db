package netstack_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

	"github.com/tamanic/tamanic/fec/fectest"
)

// echo serves UDP echo on h:port until the test ends.
func echo(t *testing.T, h *host, v6 bool, port uint16) {
	proto, addr := ipv4.ProtocolNumber, h.v4
	if v6 {
		proto, addr = ipv6.ProtocolNumber, h.v6
	}
	c, err := gonet.DialUDP(h.s, &tcpip.FullAddress{NIC: 1, Addr: addr, Port: port}, nil, proto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
}

func udpClient(t *testing.T, from, to *host, v6 bool, port uint16) *gonet.UDPConn {
	proto, src, dst := ipv4.ProtocolNumber, from.v4, to.v4
	if v6 {
		proto, src, dst = ipv6.ProtocolNumber, from.v6, to.v6
	}
	c, err := gonet.DialUDP(from.s, &tcpip.FullAddress{NIC: 1, Addr: src}, &tcpip.FullAddress{NIC: 1, Addr: dst, Port: port}, proto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUDPDatagramsUpTo64KiBBothWays(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3], modes[5]} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m})
				wc := &wireCheck{}
				w.SetFilter(wc.filter)
				echo(t, b, v6, 7)
				c := udpClient(t, a, b, v6, 7)
				maxPayload := 65507
				if v6 {
					maxPayload = 65527
				}
				rng := rand.New(rand.NewPCG(1, 2))
				got := make([]byte, 1<<16)
				for _, n := range []int{1, 100, 1472, 1473, 4000, 8192, 30000, maxPayload} {
					d := make([]byte, n)
					for i := range d {
						d[i] = byte(rng.IntN(256))
					}
					var k int
					var err error
					for try := 0; try < 3; try++ { // the first may wait for ARP/NDP
						if _, err = c.Write(d); err != nil {
							t.Fatal(err)
						}
						c.SetReadDeadline(time.Now().Add(2 * time.Second))
						if k, err = c.Read(got); err == nil {
							break
						}
					}
					if err != nil || !bytes.Equal(got[:k], d) {
						t.Fatalf("%d-byte datagram: echoed %d bytes, %v", n, k, err)
					}
				}
				wc.verify(t)
				drained(t, a, b)
			})
		}
	}
}

// A corrupted fragment: the MAC cannot check the datagram's UDP checksum,
// and gVisor's reassembly would inherit the "validated" flag when RX
// offload is advertised. The datagram must never be delivered.
func TestCorruptUDPFragmentIsNeverDelivered(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3], modes[5]} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m})
				echo(t, b, v6, 7)
				c := udpClient(t, a, b, v6, 7)
				// Warm up neighbour resolution with a small datagram.
				buf := make([]byte, 1<<16)
				for try := 0; ; try++ {
					c.Write([]byte("hello"))
					c.SetReadDeadline(time.Now().Add(time.Second))
					if _, err := c.Read(buf); err == nil {
						break
					} else if try == 3 {
						t.Fatal(err)
					}
				}
				var corrupt atomic.Bool
				corrupt.Store(true)
				w.SetFilter(func(from int, f []byte) fectest.Action {
					if from != 0 || !corrupt.Load() {
						return fectest.Pass
					}
					p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.NoCopy)
					later := false
					if v4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
						later = v4.FragOffset > 0
					} else if fr, ok := p.Layer(layers.LayerTypeIPv6Fragment).(*layers.IPv6Fragment); ok {
						later = fr.FragmentOffset > 0
					}
					if later {
						f[len(f)-7] ^= 0x5A // payload byte: header checksums stay valid
						corrupt.Store(false)
					}
					return fectest.Pass
				})
				d := bytes.Repeat([]byte("fragmented payload "), 400)
				c.Write(d)
				c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if n, err := c.Read(buf); err == nil {
					t.Fatalf("a corrupted datagram was delivered and echoed (%d bytes)", n)
				}
				if corrupt.Load() {
					t.Fatal("no fragment was corrupted: the test shows nothing")
				}
				if m.gro && b.ep.Stats().RxFragDrops == 0 {
					t.Fatal("offload mode: the endpoint did not catch the bad datagram")
				}
				// The path still works.
				c.Write(d)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, err := c.Read(buf); err != nil || !bytes.Equal(buf[:n], d) {
					i := 0
					for i < min(n, len(d)) && buf[i] == d[i] {
						i++
					}
					t.Fatalf("clean datagram after the corrupt one: %v (%d bytes back, %d sent, first difference at %d; a %+v b %+v)", err, n, len(d), i, a.ep.Stats(), b.ep.Stats())
				}
			})
		}
	}
}
