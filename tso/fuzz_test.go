package tso

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// FuzzSegment builds packets of fuzzed shape and checks every invariant:
// segments decode, carry at most MSS, keep checksums valid (or flagged for
// the NIC), and reassemble to the input.
func FuzzSegment(f *testing.F) {
	f.Add(uint64(1), uint16(60000), uint16(1448), uint8(0), uint8(3), uint8(0))
	f.Add(uint64(2), uint16(0), uint16(536), uint8(0x1F), uint8(1), uint8(1))
	f.Add(uint64(3), uint16(9000), uint16(1000), uint8(0x22), uint8(5), uint8(2))
	f.Add(uint64(4), uint16(3000), uint16(8), uint8(0x05), uint8(2), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, size, mss uint16, shape, nviews, mode uint8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		sp := spec{v6: shape&1 != 0, udp: shape&2 != 0, vlans: int(shape>>2) % 3, tcpTS: shape&16 != 0,
			flags: "FPC"[:int(shape>>5)%4], needsCsum: shape&128 != 0, payload: int(size) % 20000}
		sp.ipOpts = !sp.v6 && shape&32 != 0
		sp.hopByHop = sp.v6 && shape&64 != 0
		ty := TCP
		if sp.udp {
			ty = []Type{UDPGSO, UDPFragment}[int(shape>>6)%2]
		}
		cs := modes[int(mode)%len(modes)]
		if ty == UDPFragment && cs == HardwarePseudo {
			cs = Software
		}
		hdr, pay := build(t, sp, rng)
		vs := views(rng, pay, 1+int(nviews)%6)
		var s Segmenter
		o := Options{Type: ty, MSS: int(mss), NeedsCsum: sp.needsCsum && ty == TCP, Csum: cs, FragID: 0xC0FFEE}
		if err := s.Init(hdr, vs, o); err != nil {
			if !errors.Is(err, ErrMSS) && !errors.Is(err, ErrTooBig) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unexpected Init error %v for %+v", err, sp)
			}
			return
		}
		frames, segs := segment(t, hdr, vs, o)
		var got []byte
		l3 := 14 + 4*sp.vlans
		for i, fr := range frames {
			p := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("segment %d does not decode: %v", i, el.Error())
			}
			if ty != UDPFragment {
				checkCsums(t, fr, segs[i], cs, sp.v6, l3)
			}
			switch ty {
			case TCP:
				tc := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
				if len(tc.Payload) > int(mss) {
					t.Fatalf("segment of %d > MSS %d", len(tc.Payload), mss)
				}
				got = append(got, tc.Payload...)
			case UDPGSO:
				got = append(got, p.Layer(layers.LayerTypeUDP).(*layers.UDP).Payload...)
			}
		}
		switch ty {
		case UDPFragment:
			var d []byte
			if sp.v6 {
				d = reassemble6(t, frames, l3)
			} else {
				d = reassemble4(t, frames, segs, cs, l3)
			}
			u := gopacket.NewPacket(d, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeUDP).(*layers.UDP)
			got = u.Payload
		}
		if !bytes.Equal(got, pay) {
			t.Fatalf("payload does not reassemble: %d of %d bytes", len(got), len(pay))
		}
	})
}

// FuzzInit feeds arbitrary header bytes: Init and Next never panic, and a
// packet Init accepts comes out with all its payload, in order.
func FuzzInit(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	h, _ := build(f, spec{payload: 100}, rng)
	f.Add(h, uint16(3000), uint16(1000), uint8(1))
	h6, _ := build(f, spec{v6: true, udp: true, hopByHop: true, payload: 100}, rng)
	f.Add(h6, uint16(3000), uint16(1000), uint8(2))
	f.Fuzz(func(t *testing.T, hdr []byte, size, mss uint16, ty uint8) {
		pay := make([]byte, int(size)%10000)
		for i := range pay {
			pay[i] = byte(i)
		}
		var s Segmenter
		if s.Init(hdr, [][]byte{pay[:len(pay)/2], pay[len(pay)/2:]}, Options{Type: Type(ty % 5), MSS: int(mss), Csum: Csum(ty / 5 % 3)}) != nil {
			return
		}
		var got []byte
		for i := 0; ; i++ {
			var seg Segment
			err := s.Next(make([]byte, 512), &seg)
			if errors.Is(err, ErrDone) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(seg.Header) != s.HeaderLen(i) {
				t.Fatalf("header %d bytes, HeaderLen %d", len(seg.Header), s.HeaderLen(i))
			}
			for _, p := range seg.Payload {
				got = append(got, p...)
			}
		}
		if !bytes.Equal(got, pay) {
			t.Fatalf("payload not conserved: %d of %d bytes", len(got), len(pay))
		}
	})
}
