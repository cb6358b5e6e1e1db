package tso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/ip4defrag"
	"github.com/google/gopacket/layers"
)

// spec describes a test packet.
type spec struct {
	v6, udp   bool
	vlans     int  // 0..2 802.1Q tags
	ipOpts    bool // IPv4 options (router alert)
	ipOptsRR  bool // IPv4 Record Route (not copied into fragments) before them
	hopByHop  bool // IPv6 hop-by-hop header
	tcpTS     bool // TCP timestamps option
	payload   int
	flags     string // TCP flags on the big packet: any of "FPC"
	df        bool
	needsCsum bool // gVisor style: partial pseudo sum in the field
}

// build returns the packet's header bytes and payload, checksums complete
// (or, with needsCsum, the transport field holding gVisor's partial sum).
func build(t testing.TB, s spec, rng *rand.Rand) (hdr, payload []byte) {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	ls := []gopacket.SerializableLayer{eth}
	et := layers.EthernetTypeIPv4
	if s.v6 {
		et = layers.EthernetTypeIPv6
	}
	eth.EthernetType = et
	if s.vlans > 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		for i := 0; i < s.vlans; i++ {
			next := layers.EthernetTypeDot1Q
			if i == s.vlans-1 {
				next = et
			}
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16(10 + i), Type: next})
		}
	}
	proto := layers.IPProtocolTCP
	if s.udp {
		proto = layers.IPProtocolUDP
	}
	var nl gopacket.NetworkLayer
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		nl = ip
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, Id: uint16(rng.IntN(65536)),
			SrcIP: net.IPv4(10, 0, 0, 1).To4(), DstIP: net.IPv4(10, 0, 0, 2).To4()}
		if s.df {
			ip.Flags = layers.IPv4DontFragment
		}
		if s.ipOptsRR {
			ip.Options = []layers.IPv4Option{{OptionType: 7, OptionLength: 7, OptionData: []byte{4, 0, 0, 0, 0}}}
		}
		if s.ipOpts {
			ip.Options = append(ip.Options, layers.IPv4Option{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}})
		}
		nl = ip
		ls = append(ls, ip)
	}
	pay := make([]byte, s.payload)
	for i := range pay {
		pay[i] = byte(rng.IntN(256))
	}
	if s.udp {
		u := &layers.UDP{SrcPort: 4000, DstPort: 7}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	} else {
		tc := &layers.TCP{SrcPort: 5001, DstPort: 40000, Seq: rng.Uint32(), Ack: rng.Uint32(), ACK: true, Window: 1000,
			FIN: bytes.ContainsRune([]byte(s.flags), 'F'), PSH: bytes.ContainsRune([]byte(s.flags), 'P'),
			CWR: bytes.ContainsRune([]byte(s.flags), 'C')}
		if s.tcpTS {
			tc.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop, OptionLength: 1},
				{OptionType: layers.TCPOptionKindNop, OptionLength: 1},
				{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}
		}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	}
	ls = append(ls, gopacket.Payload(pay))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	f := bytes.Clone(buf.Bytes())
	l3 := 14 + 4*s.vlans
	if s.v6 && s.hopByHop {
		// Splice in an 8-byte hop-by-hop header (PadN); transport
		// checksums do not cover it.
		hbh := []byte{f[l3+6], 0, 1, 4, 0, 0, 0, 0}
		f[l3+6] = 0
		binary.BigEndian.PutUint16(f[l3+4:], binary.BigEndian.Uint16(f[l3+4:])+8)
		f = append(f[:l3+40], append(hbh, f[l3+40:]...)...)
	}
	// Cut at the transport header's end (gopacket pads short frames).
	end := headerEnd(gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default))
	hdr, payload = f[:end], f[end:end+s.payload]
	if s.needsCsum {
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		off, l4 := l4Offsets(p)
		l4len := len(hdr) - l4 + s.payload
		ps := pseudo(hdr, l3, s.v6, byte(proto), l4len)
		binary.BigEndian.PutUint16(hdr[off:], ps)
	}
	return hdr, payload
}

func headerEnd(p gopacket.Packet) int {
	n := 0
	for _, l := range p.Layers() {
		n += len(l.LayerContents())
		if l.LayerType() == layers.LayerTypeTCP || l.LayerType() == layers.LayerTypeUDP {
			return n
		}
	}
	return n
}

// l4Offsets returns the transport checksum offset and transport header
// offset, by walking gopacket's layers.
func l4Offsets(p gopacket.Packet) (csum, l4 int) {
	n := 0
	for _, l := range p.Layers() {
		switch l.LayerType() {
		case layers.LayerTypeTCP:
			return n + 16, n
		case layers.LayerTypeUDP:
			return n + 6, n
		}
		n += len(l.LayerContents())
	}
	return -1, -1
}

// pseudo is the folded, uncomplemented pseudo-header sum gVisor leaves,
// written here from RFC 793/8200 directly (test-only arithmetic).
func pseudo(hdr []byte, l3 int, v6 bool, proto byte, l4len int) uint16 {
	var s uint32
	addrs := hdr[l3+12 : l3+20]
	if v6 {
		addrs = hdr[l3+8 : l3+40]
	}
	for i := 0; i < len(addrs); i += 2 {
		s += uint32(binary.BigEndian.Uint16(addrs[i:]))
	}
	s += uint32(proto) + uint32(l4len)
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// views splits b into up to k views, each copied to a random offset.
func views(rng *rand.Rand, b []byte, k int) [][]byte {
	cuts := []int{0, len(b)}
	for i := 1; i < k; i++ {
		cuts = append(cuts, rng.IntN(len(b)+1))
	}
	sort.Ints(cuts)
	var vs [][]byte
	for i := 0; i+1 < len(cuts); i++ {
		part := b[cuts[i]:cuts[i+1]]
		o := rng.IntN(16)
		bk := make([]byte, len(part)+o)
		vs = append(vs, bk[o:o+copy(bk[o:], part)])
	}
	return vs
}

func within(s []byte, vs [][]byte) bool {
	for _, v := range vs {
		for i := range v {
			if &v[i] == &s[0] {
				return i+len(s) <= len(v)
			}
		}
	}
	return false
}

// segment runs the segmenter, checks the payload is referenced in place,
// and returns the frames with the NIC's work done for hardware modes
// (recording the checksum fields the NIC found).
func segment(t *testing.T, hdr []byte, vs [][]byte, o Options) (frames [][]byte, segs []Segment) {
	t.Helper()
	var s Segmenter
	if err := s.Init(hdr, vs, o); err != nil {
		t.Fatalf("Init: %v", err)
	}
	for {
		slot := make([]byte, 256)
		var seg Segment
		err := s.Next(slot, &seg)
		if errors.Is(err, ErrDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		f := bytes.Clone(seg.Header)
		for _, p := range seg.Payload {
			if !within(p, vs) {
				t.Fatal("payload piece does not reference the original views")
			}
			f = append(f, p...)
		}
		if len(f) != seg.Len {
			t.Fatalf("segment %d: Len %d, bytes %d", seg.Index, seg.Len, len(f))
		}
		seg.Payload = nil
		frames = append(frames, f)
		segs = append(segs, seg)
	}
	if len(frames) != s.Count() {
		t.Fatalf("%d segments, Count %d", len(frames), s.Count())
	}
	return frames, segs
}

// gopacketChecksums returns the IPv4 header and transport checksums gopacket
// computes for the decoded frame (transport only when the frame holds a
// whole TCP segment or UDP datagram).
func gopacketChecksums(t *testing.T, f []byte) (ip, l4 uint16, hasIP, hasL4 bool) {
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("gopacket: %v", el.Error())
	}
	var nl gopacket.NetworkLayer
	if v4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		c := *v4
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, &c, gopacket.Payload(v4.Payload)); err != nil {
			t.Fatal(err)
		}
		ip, hasIP = binary.BigEndian.Uint16(buf.Bytes()[10:]), true
		nl = v4
		if v4.Flags&layers.IPv4MoreFragments != 0 || v4.FragOffset != 0 {
			return
		}
	} else {
		v6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		nl = v6
		if p.Layer(layers.LayerTypeIPv6Fragment) != nil {
			return
		}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true}
	if tc, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
		c := *tc
		c.SetNetworkLayerForChecksum(nl)
		if err := gopacket.SerializeLayers(buf, opts, &c, gopacket.Payload(tc.Payload)); err != nil {
			t.Fatal(err)
		}
		return ip, binary.BigEndian.Uint16(buf.Bytes()[16:]), hasIP, true
	}
	u := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	c := *u
	c.SetNetworkLayerForChecksum(nl)
	if err := gopacket.SerializeLayers(buf, opts, &c, gopacket.Payload(u.Payload)); err != nil {
		t.Fatal(err)
	}
	l4 = binary.BigEndian.Uint16(buf.Bytes()[6:])
	if l4 == 0 {
		// RFC 768: a computed zero is sent as all ones (zero means "no
		// checksum"); gopacket leaves it zero.
		l4 = 0xFFFF
	}
	return ip, l4, hasIP, true
}

// checkCsums verifies a frame's checksum fields for the mode: valid
// (software), zero with the insert flags (hardware-zero), or the segment's
// pseudo-header sum (hardware-pseudo).
func checkCsums(t *testing.T, f []byte, seg Segment, mode Csum, v6 bool, l3 int) {
	t.Helper()
	// Insert flags say what the NIC will do; anything not flagged must be
	// complete already, whatever the mode.
	ipMode, l4Mode := mode, mode
	if !seg.InsertIPCsum && mode == HardwareZero {
		ipMode = Software
	}
	if !seg.InsertL4Csum {
		l4Mode = Software
	}
	ip, l4, hasIP, hasL4 := gopacketChecksums(t, f)
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	co, l4o := l4Offsets(p)
	if hasIP {
		got := binary.BigEndian.Uint16(f[l3+10:])
		switch {
		case ipMode == HardwareZero && got != 0:
			t.Fatalf("segment %d: IPv4 checksum %#x with insert, want zero", seg.Index, got)
		case ipMode != HardwareZero && got != ip:
			t.Fatalf("segment %d: IPv4 checksum %#x, gopacket %#x", seg.Index, got, ip)
		}
	}
	if !hasL4 {
		return
	}
	got := binary.BigEndian.Uint16(f[co:])
	switch l4Mode {
	case Software:
		if got != l4 {
			t.Fatalf("segment %d: transport checksum %#x, gopacket %#x", seg.Index, got, l4)
		}
	case HardwareZero:
		if got != 0 || !seg.InsertL4Csum {
			t.Fatalf("segment %d: transport checksum %#x insert %v", seg.Index, got, seg.InsertL4Csum)
		}
	case HardwarePseudo:
		proto := byte(6)
		if p.Layer(layers.LayerTypeUDP) != nil {
			proto = 17
		}
		if want := pseudo(f, l3, v6, proto, len(f)-l4o); got != want || !seg.InsertL4Csum {
			t.Fatalf("segment %d: seed %#x, want pseudo sum %#x", seg.Index, got, want)
		}
	}
}

var modes = []Csum{Software, HardwareZero, HardwarePseudo}

func TestTCPSegmentationIsValidAndReassembles(t *testing.T) {
	specs := []spec{
		{payload: 65000, tcpTS: true, flags: "FPC", df: true, needsCsum: true},
		{payload: 10000, v6: true, flags: "P", needsCsum: true},
		{payload: 3000, vlans: 1, ipOpts: true, flags: "F"},
		{payload: 5000, v6: true, hopByHop: true, vlans: 2, tcpTS: true, flags: "PC", needsCsum: true},
		{payload: 1448 * 3, needsCsum: true},
		{payload: 500, flags: "FP", needsCsum: true},        // shorter than MSS: passes through
		{payload: 0, flags: "F", needsCsum: true},           // zero payload with FIN
		{payload: 0, v6: true, flags: "", needsCsum: false}, // pure ACK
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for si, sp := range specs {
		for _, mss := range []int{1448, 536, 88, 80, 8} {
			if (sp.payload+mss-1)/mss > MaxSegments {
				continue
			}
			for _, mode := range modes {
				hdr, pay := build(t, sp, rng)
				tmpl := bytes.Clone(hdr)
				vs := views(rng, pay, 1+rng.IntN(4))
				frames, segs := segment(t, hdr, vs, Options{Type: TCP, MSS: mss, NeedsCsum: sp.needsCsum, CsumOffset: 16, Csum: mode})
				if !bytes.Equal(hdr, tmpl) {
					t.Fatal("the template header was modified")
				}
				l3 := 14 + 4*sp.vlans
				var got []byte
				var seq0 uint32
				var id0 uint16
				for i, f := range frames {
					p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
					tc := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
					if len(tc.Payload) > mss {
						t.Fatalf("spec %d: segment of %d bytes, MSS %d", si, len(tc.Payload), mss)
					}
					if i == 0 {
						seq0 = tc.Seq
					} else if tc.Seq != seq0+uint32(len(got)) {
						t.Fatalf("spec %d segment %d: seq %d, want %d", si, i, tc.Seq, seq0+uint32(len(got)))
					}
					last := i == len(frames)-1
					if tc.FIN != (last && bytes.ContainsRune([]byte(sp.flags), 'F')) ||
						tc.PSH != (last && bytes.ContainsRune([]byte(sp.flags), 'P')) ||
						tc.CWR != (i == 0 && bytes.ContainsRune([]byte(sp.flags), 'C')) {
						t.Fatalf("spec %d segment %d/%d: flags FIN %v PSH %v CWR %v", si, i, len(frames), tc.FIN, tc.PSH, tc.CWR)
					}
					if v4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
						if int(v4.Length) != len(f)-l3 {
							t.Fatalf("IPv4 length %d, frame has %d", v4.Length, len(f)-l3)
						}
						if i == 0 {
							id0 = v4.Id
						} else if v4.Id != id0+uint16(i) {
							t.Fatalf("IPv4 ID %d at segment %d, first %d", v4.Id, i, id0)
						}
					} else {
						v6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
						if int(v6.Length) != len(f)-l3-40 {
							t.Fatalf("IPv6 payload length %d, frame has %d", v6.Length, len(f)-l3-40)
						}
					}
					if mode != Software && (sp.needsCsum || len(frames) > 1) && !segs[i].InsertL4Csum {
						t.Fatalf("spec %d segment %d: %v mode did not ask the NIC for the checksum", si, i, mode)
					}
					checkCsums(t, f, segs[i], mode, sp.v6, l3)
					got = append(got, tc.Payload...)
				}
				if !bytes.Equal(got, pay) {
					t.Fatalf("spec %d MSS %d: payload does not reassemble (%d of %d bytes)", si, mss, len(got), len(pay))
				}
				if want := max(1, (len(pay)+mss-1)/mss); len(frames) != want {
					t.Fatalf("spec %d: %d segments, want %d", si, len(frames), want)
				}
			}
		}
	}
}

func TestUDPGSOMakesIndependentDatagrams(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sp := range []spec{{udp: true, payload: 60000}, {udp: true, v6: true, vlans: 1, payload: 7000}, {udp: true, payload: 100}} {
		for _, mode := range modes {
			hdr, pay := build(t, sp, rng)
			frames, segs := segment(t, hdr, views(rng, pay, 3), Options{Type: UDPGSO, MSS: 1400, Csum: mode})
			var got []byte
			for i, f := range frames {
				p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
				u := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if int(u.Length) != 8+len(u.Payload) || len(u.Payload) > 1400 {
					t.Fatalf("datagram %d: UDP length %d, payload %d", i, u.Length, len(u.Payload))
				}
				checkCsums(t, f, segs[i], mode, sp.v6, 14+4*sp.vlans)
				got = append(got, u.Payload...)
			}
			if !bytes.Equal(got, pay) {
				t.Fatal("datagrams do not carry the payload")
			}
		}
	}
}

// TestUDPFragmentationReassembles is the regression test for the broken
// ConnectX UFO: header size taken from TCP, offsets never computed, MF never
// set. A receiver must rebuild the datagram.
func TestUDPFragmentationReassembles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sp := range []spec{
		{udp: true, payload: 60000}, {udp: true, payload: 8192, ipOpts: true, vlans: 1},
		{udp: true, payload: 1}, {udp: true, v6: true, payload: 30000}, {udp: true, v6: true, hopByHop: true, payload: 4000},
	} {
		for _, mode := range []Csum{Software, HardwareZero} {
			for _, mss := range []int{1480, 1000, 8} {
				if mss == 8 && sp.payload > 5000 {
					continue // more than MaxSegments fragments
				}
				hdr, pay := build(t, sp, rng)
				frames, segs := segment(t, hdr, views(rng, pay, 4), Options{Type: UDPFragment, MSS: mss, Csum: mode, FragID: 0xC0FFEE})
				l3 := 14 + 4*sp.vlans
				var dgram []byte
				if sp.v6 {
					dgram = reassemble6(t, frames, l3)
				} else {
					dgram = reassemble4(t, frames, segs, mode, l3)
				}
				p := gopacket.NewPacket(dgram, layers.LayerTypeEthernet, gopacket.Default)
				u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if !ok || !bytes.Equal(u.Payload, pay) {
					t.Fatalf("%+v mss %d: reassembled datagram differs", sp, mss)
				}
				_, l4, _, _ := gopacketChecksums(t, dgram)
				if u.Checksum != l4 {
					t.Fatalf("%+v: UDP checksum %#x, gopacket %#x", sp, u.Checksum, l4)
				}
			}
		}
	}
}

// reassemble4 checks every IPv4 fragment (one ID, MF on all but the last,
// offsets contiguous in 8-byte units, valid header checksum) and rebuilds
// the datagram with gopacket's ip4defrag.
func reassemble4(t *testing.T, frames [][]byte, segs []Segment, mode Csum, l3 int) []byte {
	t.Helper()
	d := ip4defrag.NewIPv4Defragmenter()
	var id uint16
	next := 0
	var out *layers.IPv4
	var joined []byte
	manual := false
	for i, f := range frames {
		if mode == HardwareZero {
			if !segs[i].InsertIPCsum || segs[i].InsertL4Csum {
				t.Fatalf("fragment %d: insert flags %+v", i, segs[i])
			}
			if c := binary.BigEndian.Uint16(f[l3+10:]); c != 0 {
				t.Fatalf("fragment %d: IPv4 checksum field %#x; the NIC inserts over a zero field", i, c)
			}
			f = bytes.Clone(f)
			ip, _, _, _ := gopacketChecksums(t, f)
			binary.BigEndian.PutUint16(f[l3+10:], ip) // the NIC's work
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		v4 := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if i == 0 {
			id = v4.Id
		}
		if v4.Id != id || int(v4.FragOffset)*8 != next || (v4.Flags&layers.IPv4MoreFragments != 0) != (i < len(frames)-1) {
			t.Fatalf("fragment %d: id %d offset %d flags %v (want id %d offset %d)", i, v4.Id, v4.FragOffset*8, v4.Flags, id, next)
		}
		if i < len(frames)-1 && len(v4.Payload)%8 != 0 {
			t.Fatalf("fragment %d carries %d bytes, not a multiple of 8", i, len(v4.Payload))
		}
		ipc, _, _, _ := gopacketChecksums(t, f)
		if v4.Checksum != ipc {
			t.Fatalf("fragment %d: header checksum %#x, gopacket %#x", i, v4.Checksum, ipc)
		}
		next += len(v4.Payload)
		joined = append(joined, v4.Payload...)
		// ip4defrag assumes 20-byte headers and refuses fragments under 8
		// bytes (a legal last fragment): reassemble those by hand.
		if manual = manual || v4.IHL > 5 || len(v4.Payload) < 8; manual {
			if i == len(frames)-1 {
				c := *v4
				c.Payload = joined
				out = &c
			}
			continue
		}
		r, err := d.DefragIPv4(v4)
		if err != nil {
			t.Fatal(err)
		}
		if r != nil {
			out = r
		}
	}
	if out == nil {
		t.Fatalf("datagram not reassembled (IHL %d)", gopacket.NewPacket(frames[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeIPv4).(*layers.IPv4).IHL)
	}
	buf := gopacket.NewSerializeBuffer()
	out.Flags, out.FragOffset = 0, 0
	eth := gopacket.NewPacket(frames[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	e := *eth
	e.EthernetType = layers.EthernetTypeIPv4
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, &e, out, gopacket.Payload(out.Payload))
	return buf.Bytes()
}

// reassemble6 rebuilds an IPv6 datagram from fragments decoded by gopacket.
func reassemble6(t *testing.T, frames [][]byte, l3 int) []byte {
	t.Helper()
	var data []byte
	var first *layers.IPv6
	for i, f := range frames {
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		fr, ok := p.Layer(layers.LayerTypeIPv6Fragment).(*layers.IPv6Fragment)
		if len(frames) == 1 {
			// RFC 8021: a datagram that fits one packet goes whole, never
			// as an atomic fragment.
			if ok {
				t.Fatalf("a datagram that fits one packet was sent as an atomic fragment (offset %d, M %v)", fr.FragmentOffset, fr.MoreFragments)
			}
			return f
		}
		if !ok {
			t.Fatalf("fragment %d has no fragment header", i)
		}
		if fr.Identification != 0xC0FFEE || int(fr.FragmentOffset)*8 != len(data) || fr.MoreFragments != (i < len(frames)-1) {
			t.Fatalf("fragment %d: id %#x offset %d M %v", i, fr.Identification, fr.FragmentOffset*8, fr.MoreFragments)
		}
		if i == 0 {
			first = p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		}
		data = append(data, fr.Payload...)
	}
	ip := *first
	ip.NextHeader = layers.IPProtocolUDP
	ip.HopByHop = nil
	eth := gopacket.NewPacket(frames[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	e := *eth
	e.EthernetType = layers.EthernetTypeIPv6
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, &e, &ip, gopacket.Payload(data))
	return buf.Bytes()
}

func TestPassThroughFinishesTheChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sp := range []spec{{payload: 100, needsCsum: true}, {payload: 100}, {udp: true, v6: true, payload: 30, needsCsum: true}} {
		hdr, pay := build(t, sp, rng)
		frames, segs := segment(t, hdr, [][]byte{pay}, Options{Type: None, NeedsCsum: sp.needsCsum})
		if len(frames) != 1 {
			t.Fatal("pass-through made more than one segment")
		}
		checkCsums(t, frames[0], segs[0], Software, sp.v6, 14)
	}
}

func TestRejectsWithTypedErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	tcp, tpay := build(t, spec{payload: 3000}, rng)
	udp, upay := build(t, spec{udp: true, payload: 3000, df: true}, rng)
	udp6, _ := build(t, spec{udp: true, v6: true, payload: 300}, rng)
	badOpts, _ := build(t, spec{udp: true, ipOpts: true, payload: 3000}, rng)
	badOpts[14+20+1] = 40 // router alert claiming 40 bytes
	big := make([]byte, 70000)
	cases := []struct {
		name string
		hdr  []byte
		pay  []byte
		o    Options
		want error
	}{
		{"MSS below minimum", tcp, tpay, Options{Type: TCP, MSS: MinTCPMSS - 1}, ErrMSS},
		{"TCP type on UDP", udp, upay, Options{Type: TCP, MSS: 1000}, ErrType},
		{"UDP GSO on TCP", tcp, tpay, Options{Type: UDPGSO, MSS: 1000}, ErrType},
		{"fragmenting a DF datagram", udp, upay, Options{Type: UDPFragment, MSS: 1000}, ErrFragmentDF},
		{"truncated headers", tcp[:30], tpay, Options{Type: TCP, MSS: 1000}, ErrHeader},
		{"headers plus payload bytes", append(bytes.Clone(tcp), 1, 2), tpay, Options{Type: TCP, MSS: 1000}, ErrHeader},
		{"wrong checksum offset", tcp, tpay, Options{Type: TCP, MSS: 1000, CsumOffset: 6}, ErrHeader},
		{"too big", tcp, big, Options{Type: TCP, MSS: 1000}, ErrTooBig},
		{"too many segments", udp6, make([]byte, 60000), Options{Type: UDPGSO, MSS: 8}, ErrTooBig},
		{"unknown type", tcp, tpay, Options{Type: 9, MSS: 1000}, ErrType},
		{"not IP", append(make([]byte, 12), 0x08, 0x06), nil, Options{Type: TCP, MSS: 1000}, ErrHeader},
		{"malformed IPv4 options", badOpts, upay, Options{Type: UDPFragment, MSS: 1000}, ErrHeader},
	}
	for _, c := range cases {
		var s Segmenter
		err := s.Init(c.hdr, [][]byte{c.pay}, c.o)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			continue
		}
		// The message names the kind of error and then says more.
		if msg := err.Error(); !strings.HasPrefix(msg, c.want.Error()) || (err != c.want && len(msg) <= len(c.want.Error())) {
			t.Errorf("%s: message %q", c.name, msg)
		}
	}
	var s Segmenter
	if err := s.Init(tcp, [][]byte{tpay}, Options{Type: TCP, MSS: 1000}); err != nil {
		t.Fatal(err)
	}
	var seg Segment
	if err := s.Next(make([]byte, 10), &seg); !errors.Is(err, ErrSlot) {
		t.Fatalf("small slot: %v", err)
	}
	for s.Next(make([]byte, 256), &seg) == nil {
	}
	if err := s.Next(make([]byte, 256), &seg); !errors.Is(err, ErrDone) {
		t.Fatalf("after the last: %v", err)
	}
	for ty, want := range map[Type]string{None: "none", TCP: "tcp", UDPFragment: "udp-fragment", UDPGSO: "udp-gso", 7: "Type(7)"} {
		if got := ty.String(); got != want {
			t.Errorf("Type %d is %q, want %q", int(ty), got, want)
		}
	}
}

// RFC 791: options whose copy flag is clear (Record Route) travel in the
// first fragment only; Linux overwrites them with no-operations in the
// others (ip_options_fragment). Router Alert (copied) stays everywhere.
func TestUDPFragmentsCarryOnlyCopiedIPv4Options(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, mode := range []Csum{Software, HardwareZero} {
		hdr, pay := build(t, spec{udp: true, ipOpts: true, ipOptsRR: true, payload: 3000}, rng)
		frames, segs := segment(t, hdr, views(rng, pay, 3), Options{Type: UDPFragment, MSS: 1000, Csum: mode})
		if len(frames) < 3 {
			t.Fatalf("%d fragments", len(frames))
		}
		for i, f := range frames {
			v4 := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			var rr, ra bool
			for _, o := range v4.Options {
				switch o.OptionType {
				case 7:
					rr = true
				case 0x94:
					ra = true
				}
			}
			if rr != (i == 0) || !ra || v4.IHL != 8 {
				t.Fatalf("%v fragment %d: record route %v, router alert %v, IHL %d", mode, i, rr, ra, v4.IHL)
			}
			if mode == Software {
				if ipc, _, _, _ := gopacketChecksums(t, f); v4.Checksum != ipc {
					t.Fatalf("fragment %d: header checksum %#x, gopacket %#x", i, v4.Checksum, ipc)
				}
			}
		}
		d := reassemble4(t, frames, segs, mode, 14)
		if u := gopacket.NewPacket(d, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeUDP).(*layers.UDP); !bytes.Equal(u.Payload, pay) {
			t.Fatal("payload does not reassemble")
		}
	}
}

// RFC 8021: an IPv6 datagram that fits one packet is sent whole, not as an
// atomic fragment (a fragment header with offset 0 and M clear), with its
// UDP checksum complete.
func TestIPv6DatagramThatFitsIsNotAnAtomicFragment(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, sp := range []spec{{udp: true, v6: true, payload: 100}, {udp: true, v6: true, hopByHop: true, vlans: 1, payload: 1400}} {
		for _, mode := range []Csum{Software, HardwareZero} {
			hdr, pay := build(t, sp, rng)
			frames, segs := segment(t, hdr, views(rng, pay, 2), Options{Type: UDPFragment, MSS: 1480, Csum: mode, FragID: 7})
			if len(frames) != 1 {
				t.Fatalf("%d frames", len(frames))
			}
			p := gopacket.NewPacket(frames[0], layers.LayerTypeEthernet, gopacket.Default)
			if p.Layer(layers.LayerTypeIPv6Fragment) != nil {
				t.Fatalf("%+v %v: sent as an atomic fragment", sp, mode)
			}
			u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if !ok || !bytes.Equal(u.Payload, pay) || int(u.Length) != 8+len(pay) {
				t.Fatalf("%+v: not the datagram", sp)
			}
			if _, l4, _, _ := gopacketChecksums(t, frames[0]); u.Checksum != l4 || segs[0].InsertL4Csum {
				t.Fatalf("%+v %v: UDP checksum %#x, gopacket %#x, insert flag %v", sp, mode, u.Checksum, l4, segs[0].InsertL4Csum)
			}
		}
	}
}
