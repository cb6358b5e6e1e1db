package fec_test

import (
	"bytes"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

type frameSpec struct {
	v6, vlan, udp bool
	payload       int
}

// build serialises a frame with gopacket, checksums computed by gopacket.
func build(t testing.TB, s frameSpec, dst [6]byte, rng *rand.Rand) []byte {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, DstMAC: net.HardwareAddr(dst[:])}
	var ls []gopacket.SerializableLayer
	ls = append(ls, eth)
	et := layers.EthernetTypeIPv4
	if s.v6 {
		et = layers.EthernetTypeIPv6
	}
	if s.vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 42, Type: et})
	} else {
		eth.EthernetType = et
	}
	var nl gopacket.NetworkLayer
	proto := layers.IPProtocolTCP
	if s.udp {
		proto = layers.IPProtocolUDP
	}
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto,
			SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		nl = ip
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, Id: uint16(rng.IntN(65536)),
			SrcIP: net.IPv4(10, 0, 0, 1).To4(), DstIP: net.IPv4(10, 0, 0, 2).To4()}
		nl = ip
		ls = append(ls, ip)
	}
	payload := make([]byte, s.payload)
	for i := range payload {
		payload[i] = byte(rng.IntN(256))
	}
	if s.udp {
		u := &layers.UDP{SrcPort: 5000, DstPort: 7}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	} else {
		tc := &layers.TCP{SrcPort: 5001, DstPort: 40000, Seq: rng.Uint32(), Ack: rng.Uint32(), ACK: true, PSH: true, Window: 512}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	}
	ls = append(ls, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// csumOffsets returns the offsets of the IPv4 header checksum (-1 for IPv6)
// and the L4 checksum, found by walking gopacket's layers from the front.
func csumOffsets(t testing.TB, f []byte) (ip, l4 int) {
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip, l4 = -1, -1
	off := 0
	for _, l := range p.Layers() {
		switch l.LayerType() {
		case layers.LayerTypeIPv4:
			ip = off + 10
		case layers.LayerTypeTCP:
			l4 = off + 16
		case layers.LayerTypeUDP:
			l4 = off + 6
		}
		off += len(l.LayerContents())
	}
	if l4 < 0 {
		t.Fatalf("no transport layer in %x", f)
	}
	return ip, l4
}

var specs = []frameSpec{
	{payload: 1000}, {udp: true, payload: 333}, {v6: true, payload: 1400}, {v6: true, udp: true, payload: 17},
	{vlan: true, payload: 600}, {vlan: true, v6: true, udp: true, payload: 1200}, {payload: 0}, {udp: true, payload: 1},
}

func TestChecksumInsertionMatchesAnIndependentEncoder(t *testing.T) {
	for _, soc := range []fec.SoC{fec.IMX6UL, fec.IMX6Q, fec.IMX7D} {
		for _, s := range strategies {
			r, tp := newTapRig(t, fectest.RigOptions{SoC: soc, Config: func(c *fec.Config) { c.Strategy = s }})
			rng := rand.New(rand.NewPCG(uint64(soc), 11))
			for i, sp := range specs {
				want := build(t, sp, [6]byte{2, 0, 0, 0, 0, 9}, rng)
				f := bytes.Clone(want)
				ipo, l4o := csumOffsets(t, f)
				if ipo >= 0 {
					f[ipo], f[ipo+1] = 0xDE, 0xAD // garbage the driver must clear
				}
				f[l4o], f[l4o+1] = 0xBE, 0xEF
				hdr := l4o + 2 + rng.IntN(8)
				hdr = min(hdr, len(f))
				frags := append([][]byte{f[:hdr]}, scatter(rng, f[hdr:], 3)...)
				if err := r.NIC.Transmit(frags, fec.TxOptions{Csum: true}, nil); err != nil {
					t.Fatalf("%v spec %d: %v", s, i, err)
				}
				r.NIC.Reclaim()
				got := tp.take()
				if len(got) != 1 || !bytes.Equal(got[0], padded(want)) {
					t.Fatalf("%v spec %+v: wire frame\n got %x\nwant %x", s, sp, got, want)
				}
			}
		}
	}
}

func TestChecksumOffloadNeedsHeadersInTheFirstFragment(t *testing.T) {
	r, _ := newTapRig(t, fectest.RigOptions{})
	f := build(t, frameSpec{payload: 100}, [6]byte{2}, rand.New(rand.NewPCG(1, 1)))
	err := r.NIC.Transmit([][]byte{f[:20], f[20:]}, fec.TxOptions{Csum: true}, nil)
	if err == nil {
		t.Fatal("split header accepted")
	}
	if st := r.NIC.Stats().Tx; st.CsumErrors != 1 {
		t.Fatalf("CsumErrors = %d", st.CsumErrors)
	}
}

func badIPv4Frame() []byte {
	f := build(nil, frameSpec{udp: true, payload: 60}, nicMAC, rand.New(rand.NewPCG(9, 9)))
	f[14+10] ^= 0xFF
	return f
}

// lastFragment returns a padded 60-byte frame holding the last fragment of
// an IPv4 datagram with a 1-byte payload (offset 1480 bytes), header
// checksum valid.
func lastFragment() []byte {
	f := make([]byte, 60)
	copy(f, nicMAC[:])
	copy(f[6:], []byte{2, 0, 0, 0, 0, 9})
	f[12], f[13] = 0x08, 0x00
	ip := f[14:34]
	ip[0], ip[3] = 0x45, 21  // total length 21
	ip[6], ip[7] = 0x00, 185 // offset 185*8, MF clear
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	c := ^ones(ip)
	ip[10], ip[11] = byte(c>>8), byte(c)
	f[34] = 0xAB
	return f
}

// The MAC's verdict fields as the manual lays them out (protocol in bits
// 23:16, header length in 31:27 of the word at +12); ICE/PCR mean "not
// verified": every frame is delivered, and only what the MAC verified is
// claimed. A driver reading the fields swapped claims no L4 verdict (tcp4
// fails); one that drops on ICE/PCR loses the fragment, the bad-checksum
// and the non-IP frames.
func TestRxChecksumVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	ipv4Frag := build(t, frameSpec{udp: true, payload: 100}, nicMAC, rng)
	ipv4Frag[14+6] = 0x20 // MF: hardware cannot check the UDP checksum
	ipv4Frag[14+10], ipv4Frag[14+11] = 0, 0
	ipc := ^ones(ipv4Frag[14:34])
	ipv4Frag[14+10], ipv4Frag[14+11] = byte(ipc>>8), byte(ipc)
	badL4 := build(t, frameSpec{payload: 100}, nicMAC, rng)
	badL4[len(badL4)-1] ^= 1
	icmp := build(t, frameSpec{udp: true, payload: 40}, nicMAC, rng)
	icmp[14+9] = 1 // ICMP: not a protocol the MAC checks
	icmp[14+10], icmp[14+11] = 0, 0
	ipc = ^ones(icmp[14:34])
	icmp[14+10], icmp[14+11] = byte(ipc>>8), byte(ipc)
	cases := []struct {
		name    string
		f       []byte
		want    fec.CsumInfo
		flagged bool
	}{
		{"tcp4", build(t, frameSpec{payload: 500}, nicMAC, rng), fec.CsumInfo{IPv4: true, L4: true}, false},
		{"udp4 1-byte payload", build(t, frameSpec{udp: true, payload: 1}, nicMAC, rng), fec.CsumInfo{IPv4: true, L4: true}, false},
		{"udp6", build(t, frameSpec{v6: true, udp: true, payload: 50}, nicMAC, rng), fec.CsumInfo{L4: true}, false},
		{"tcp6 vlan", build(t, frameSpec{v6: true, vlan: true, payload: 900}, nicMAC, rng), fec.CsumInfo{L4: true}, false},
		{"ipv4 fragment", ipv4Frag, fec.CsumInfo{IPv4: true}, true},
		{"1-byte last fragment", lastFragment(), fec.CsumInfo{}, true},
		{"icmp", icmp, fec.CsumInfo{IPv4: true}, true},
		{"not ip", randomFrame(rng, 80, nicMAC), fec.CsumInfo{}, false},
		{"bad tcp checksum", badL4, fec.CsumInfo{IPv4: true}, true},
		{"bad ipv4 header checksum", badIPv4Frame(), fec.CsumInfo{}, true},
	}
	for _, legacy := range []bool{false, true} {
		r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.LegacyBD = legacy }})
		flagged := 0
		for _, c := range cases {
			r.Model.Deliver(c.f, fectest.RxOK)
			p, err := r.NIC.Receive()
			if err != nil || p == nil || !bytes.Equal(p.Data, c.f) {
				t.Fatalf("legacy=%v %s: %v %v: every frame must be delivered intact", legacy, c.name, p, err)
			}
			want := c.want
			if legacy {
				want = fec.CsumInfo{} // no verdicts at all: the stack checks everything
			} else if c.flagged {
				flagged++
			}
			if p.Csum != want {
				t.Fatalf("legacy=%v %s: verdict %+v, want %+v", legacy, c.name, p.Csum, want)
			}
			p.Release()
		}
		if st := r.NIC.Stats().Rx; st.CsumFlagged != uint64(flagged) || st.Dropped() != 0 {
			t.Fatalf("legacy=%v: %d flagged, %d dropped; want %d flagged, none dropped", legacy, st.CsumFlagged, st.Dropped(), flagged)
		}
	}
}

func ones(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
