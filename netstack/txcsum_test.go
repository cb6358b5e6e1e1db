package netstack_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkttest"
)

// datagrams reassembles the UDP datagrams on the wire (fragmented or not)
// with gopacket and checks each one's UDP checksum over the whole
// datagram: present (not zero) and valid.
type datagrams struct {
	mu      sync.Mutex
	parts   map[string]map[int][]byte // by source, destination and ID: payload by offset
	last    map[string]int            // end of the datagram, once its last fragment is seen
	pseudo  map[string][]byte
	ok, bad int
	errs    []string
}

func newDatagrams() *datagrams {
	return &datagrams{parts: map[string]map[int][]byte{}, last: map[string]int{}, pseudo: map[string][]byte{}}
}

func (d *datagrams) filter(_ int, f []byte) fectest.Action {
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	var key string
	var src, dst []byte
	var off int
	var more bool
	var payload []byte
	switch {
	case p.Layer(layers.LayerTypeIPv4) != nil:
		ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip.Protocol != layers.IPProtocolUDP {
			return fectest.Pass
		}
		src, dst = ip.SrcIP.To4(), ip.DstIP.To4()
		key = fmt.Sprintf("4 %v %v %d", ip.SrcIP, ip.DstIP, ip.Id)
		off, more, payload = int(ip.FragOffset)*8, ip.Flags&layers.IPv4MoreFragments != 0, ip.Payload
	case p.Layer(layers.LayerTypeIPv6Fragment) != nil:
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		fr := p.Layer(layers.LayerTypeIPv6Fragment).(*layers.IPv6Fragment)
		if fr.NextHeader != layers.IPProtocolUDP {
			return fectest.Pass
		}
		src, dst = ip.SrcIP, ip.DstIP
		key = fmt.Sprintf("6 %v %v %d", ip.SrcIP, ip.DstIP, fr.Identification)
		off, more, payload = int(fr.FragmentOffset)*8, fr.MoreFragments, fr.Payload
	case p.Layer(layers.LayerTypeIPv6) != nil:
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip.NextHeader != layers.IPProtocolUDP {
			return fectest.Pass
		}
		src, dst = ip.SrcIP, ip.DstIP
		key = fmt.Sprintf("6 %v %v unfragmented %d", ip.SrcIP, ip.DstIP, rand.Uint64())
		payload = ip.Payload
	default:
		return fectest.Pass
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.parts[key] == nil {
		d.parts[key] = map[int][]byte{}
	}
	d.parts[key][off] = append([]byte(nil), payload...)
	if off == 0 {
		d.pseudo[key] = append(append([]byte(nil), src...), dst...)
	}
	if !more {
		d.last[key] = off + len(payload)
	}
	end, done := d.last[key]
	if !done {
		return fectest.Pass
	}
	var whole []byte
	for len(whole) < end {
		part, ok := d.parts[key][len(whole)]
		if !ok {
			return fectest.Pass // a fragment still missing
		}
		whole = append(whole, part...)
	}
	delete(d.parts, key)
	delete(d.last, key)
	ps := d.pseudo[key]
	delete(d.pseudo, key)
	s := pkttest.Sum(0, ps) + 17 + uint32(len(whole)) + pkttest.Sum(0, whole)
	if binary.BigEndian.Uint16(whole[6:]) == 0 || pkttest.Fold(s) != 0xFFFF {
		d.bad++
		if len(d.errs) < 5 {
			d.errs = append(d.errs, fmt.Sprintf("%s: %d bytes, checksum field %#04x, sum %#04x", key, len(whole), binary.BigEndian.Uint16(whole[6:]), pkttest.Fold(s)))
		}
	} else {
		d.ok++
	}
	return fectest.Pass
}

// TestTXChecksumOffloadCompletesEveryChecksum: with TX checksum offload
// advertised to gVisor (the ENET inserts checksums), every TCP and UDP
// checksum on the wire is still present and valid: TCP's inserted by the
// MAC, UDP's computed by the endpoint, over the whole datagram for those
// gVisor fragments (held until their last fragment). UDP datagrams of
// every size up to 64 KiB go out in the modes without GSO, with it, and
// both IP versions; a bulk TCP transfer's frames are checked too.
func TestTXChecksumOffloadCompletesEveryChecksum(t *testing.T) {
	for _, m := range []mode{modes[0], modes[1], modes[5]} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
				if a.ep.Capabilities()&stack.CapabilityTXChecksumOffload == 0 {
					t.Fatal("TX checksum offload not advertised on the ENET")
				}
				wc := &wireCheck{}
				dg := newDatagrams()
				w.SetFilter(func(from int, f []byte) fectest.Action {
					wc.filter(from, f)
					return dg.filter(from, f)
				})
				echo(t, b, v6, 7)
				c := udpClient(t, a, b, v6, 7)
				maxPayload := 65507
				if v6 {
					maxPayload = 65527
				}
				rng := rand.New(rand.NewPCG(3, 4))
				got := make([]byte, 1<<16)
				for _, n := range []int{1, 2, 3, 100, 1471, 1472, 1473, 2961, 4000, 8192, 30001, maxPayload} {
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
				if err := transfer(t, a, b, v6, 5001, 2<<20); err != nil {
					t.Fatal(err)
				}
				wc.verify(t)
				drained(t, a, b)
				dg.mu.Lock()
				defer dg.mu.Unlock()
				if dg.bad > 0 || dg.ok < 24 {
					t.Fatalf("UDP datagrams on the wire: %d good, %d bad: %v", dg.ok, dg.bad, dg.errs)
				}
				if st := a.ep.Stats(); st.TxSoftCsum == 0 || st.TxFragDrops != 0 {
					t.Fatalf("endpoint: %d checksums computed, %d fragments dropped", st.TxSoftCsum, st.TxFragDrops)
				}
			})
		}
	}
}
