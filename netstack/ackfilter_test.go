package netstack

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/tamanic/tamanic/internal/pkt"
)

// seg describes a TCP segment for ackFrame.
type seg struct {
	v6           bool
	sport, dport uint16
	ack          uint32
	flags        header.TCPFlags
	opts         []byte // TCP options, padded by the caller to 4 bytes
	data         int
	tos          uint8 // IPv4 TOS / ECN bits
	badCsum      bool
	vlan         bool
}

var tsOpt = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}

// ackFrame builds an Ethernet frame holding s, with correct checksums
// unless s.badCsum.
func ackFrame(s seg) []byte {
	tcpLen := header.TCPMinimumSize + len(s.opts) + s.data
	src4, dst4 := tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), tcpip.AddrFrom4([4]byte{10, 0, 0, 1})
	src6 := tcpip.AddrFrom16([16]byte{0xfd, 15: 2})
	dst6 := tcpip.AddrFrom16([16]byte{0xfd, 15: 1})
	et, ipLen := header.IPv4ProtocolNumber, header.IPv4MinimumSize
	if s.v6 {
		et, ipLen = header.IPv6ProtocolNumber, header.IPv6MinimumSize
	}
	eth := header.EthernetMinimumSize
	if s.vlan {
		eth += 4
	}
	f := make([]byte, eth+ipLen+tcpLen)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: "\x02\x00\x00\x00\x00\x02", DstAddr: "\x02\x00\x00\x00\x00\x01", Type: et})
	if s.vlan {
		f[12], f[13], f[14], f[15], f[16], f[17] = 0x81, 0x00, 0, 5, byte(et>>8), byte(et)
	}
	ip := f[eth:]
	src, dst := src4, dst4
	if s.v6 {
		src, dst = src6, dst6
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: uint16(tcpLen), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: src, DstAddr: dst})
	} else {
		h := header.IPv4(ip)
		h.Encode(&header.IPv4Fields{TOS: s.tos, TotalLength: uint16(ipLen + tcpLen), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
			SrcAddr: src, DstAddr: dst})
		h.SetChecksum(^h.CalculateChecksum())
	}
	t := header.TCP(ip[ipLen:])
	t.Encode(&header.TCPFields{SrcPort: s.sport, DstPort: s.dport, SeqNum: 1, AckNum: s.ack,
		DataOffset: uint8(header.TCPMinimumSize + len(s.opts)), Flags: s.flags, WindowSize: 1000})
	copy(t[header.TCPMinimumSize:], s.opts)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(tcpLen))
	t.SetChecksum(^checksum.Checksum(t, xsum))
	if s.badCsum {
		t.SetChecksum(t.Checksum() + 1)
	}
	return f
}

// testFrame is a Frame over a byte slice.
type testFrame struct {
	b        []byte
	released int
}

func (f *testFrame) Bytes() []byte             { return f.b }
func (f *testFrame) Verified() (ipv4, l4 bool) { return false, false }
func (f *testFrame) Release() error            { f.released++; return nil }

func TestClassifyACK(t *testing.T) {
	ack := header.TCPFlagAck
	for _, c := range []struct {
		name string
		s    seg
		want bool
	}{
		{"pure ACK", seg{ack: 5, flags: ack}, true},
		{"pure ACK IPv6", seg{v6: true, ack: 5, flags: ack}, true},
		{"timestamps", seg{ack: 5, flags: ack, opts: tsOpt}, true},
		{"SACK", seg{ack: 5, flags: ack, opts: []byte{1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}}, false},
		{"unknown option", seg{ack: 5, flags: ack, opts: []byte{30, 4, 0, 0}}, false},
		{"truncated timestamps", seg{ack: 5, flags: ack, opts: []byte{1, 1, 8, 10}}, false},
		{"data", seg{ack: 5, flags: ack, data: 1}, false},
		{"PSH", seg{ack: 5, flags: ack | header.TCPFlagPsh}, false},
		{"FIN", seg{ack: 5, flags: ack | header.TCPFlagFin}, false},
		{"SYN", seg{ack: 5, flags: ack | header.TCPFlagSyn}, false},
		{"RST", seg{ack: 5, flags: ack | header.TCPFlagRst}, false},
		{"ECE", seg{ack: 5, flags: ack | header.TCPFlagEce}, false},
		{"CWR", seg{ack: 5, flags: ack | header.TCPFlagCwr}, false},
		{"no ACK flag", seg{ack: 5}, false},
		{"CE marked", seg{ack: 5, flags: ack, tos: 3}, false},
		{"ECT(0) not CE", seg{ack: 5, flags: ack, tos: 2}, true},
		{"VLAN tagged", seg{ack: 5, flags: ack, vlan: true}, false},
	} {
		if got := classifyACK(ackFrame(c.s)).ok; got != c.want {
			t.Errorf("%s: filterable %v, want %v", c.name, got, c.want)
		}
	}
	// Not TCP, truncated, fragment.
	udp := ackFrame(seg{ack: 5, flags: ack})
	udp[14+9] = 17
	frag := ackFrame(seg{ack: 5, flags: ack})
	frag[14+6] = 0x20 // MF
	ce6 := ackFrame(seg{v6: true, ack: 5, flags: ack})
	ce6[14+1] |= 0x30 // traffic class ECN bits: CE
	hbh := ackFrame(seg{v6: true, ack: 5, flags: ack})
	hbh[14+6] = 0 // next header: hop-by-hop options
	opts4 := ackFrame(seg{ack: 5, flags: ack})
	opts4[14] = 0x46 // IHL 6: IPv4 options
	for name, f := range map[string][]byte{"UDP": udp, "fragment": frag, "IPv6 CE": ce6,
		"IPv6 extension header": hbh, "IPv4 options": opts4, "large frame": ackFrame(seg{ack: 5, flags: ack, data: 200}), "truncated": ackFrame(seg{ack: 5, flags: ack})[:50], "empty": nil} {
		if classifyACK(f).ok {
			t.Errorf("%s: classified as a filterable ACK", name)
		}
	}
}

func TestFilterACKsKeepsWhatTheStackNeeds(t *testing.T) {
	ack := header.TCPFlagAck
	batch := []seg{
		{sport: 1, dport: 2, ack: 100, flags: ack},                                                   // 0 dropped: 3 acks more
		{sport: 1, dport: 2, ack: 200, flags: ack, opts: tsOpt},                                      // 1 dropped
		{sport: 1, dport: 2, ack: 200, flags: ack, data: 10},                                         // 2 data: kept
		{sport: 1, dport: 2, ack: 300, flags: ack},                                                   // 3 kept: the later 300 is a duplicate
		{sport: 1, dport: 2, ack: 300, flags: ack},                                                   // 4 duplicate: kept
		{sport: 9, dport: 2, ack: 50, flags: ack},                                                    // 5 other connection: kept
		{v6: true, sport: 1, dport: 2, ack: 10, flags: ack},                                          // 6 dropped by 7
		{v6: true, sport: 1, dport: 2, ack: 20, flags: ack},                                          // 7 kept
		{sport: 3, dport: 4, ack: 0xFFFFFF00, flags: ack},                                            // 8 dropped: 9 is after it modulo 2^32
		{sport: 3, dport: 4, ack: 0x100, flags: ack},                                                 // 9 kept
		{sport: 5, dport: 6, ack: 10, flags: ack},                                                    // 10 kept: 11 has a bad checksum
		{sport: 5, dport: 6, ack: 20, flags: ack, badCsum: true},                                     // 11 kept (the stack drops it)
		{sport: 7, dport: 8, ack: 10, flags: ack},                                                    // 12 kept: 13 carries SACK
		{sport: 7, dport: 8, ack: 20, flags: ack, opts: []byte{1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}}, // 13 kept
		{sport: 7, dport: 8, ack: 5, flags: ack},                                                     // 14 kept: a reordered, older ACK
	}
	want := map[int]bool{0: true, 1: true, 6: true, 8: true}
	frames := make([]Frame, len(batch))
	for i, s := range batch {
		frames[i] = &testFrame{b: ackFrame(s)}
	}
	e := &Endpoint{}
	slots := make([]ackSlot, len(frames))
	n := filterACKs(frames, slots, e.ackTrusted)
	for i := range frames {
		if slots[i].drop != want[i] {
			t.Errorf("frame %d (%+v): dropped %v, want %v", i, batch[i], slots[i].drop, want[i])
		}
	}
	if n != len(want) {
		t.Errorf("filtered %d, want %d", n, len(want))
	}
}

// Duplicate ACKs of an acknowledgement that a later ACK in the batch
// supersedes are dropped with it (the segment they report missing has
// arrived); duplicates of the highest acknowledgement are all kept.
func TestFilterACKsDropsOnlyDuplicatesOfASupersededACK(t *testing.T) {
	ack := header.TCPFlagAck
	acks := []uint32{100, 100, 100, 200, 200, 200}
	frames := make([]Frame, len(acks))
	for i, a := range acks {
		frames[i] = &testFrame{b: ackFrame(seg{sport: 1, dport: 2, ack: a, flags: ack})}
	}
	slots := make([]ackSlot, len(frames))
	e := &Endpoint{}
	if n := filterACKs(frames, slots, e.ackTrusted); n != 3 {
		t.Errorf("filtered %d, want 3", n)
	}
	for i := range frames {
		if want := acks[i] == 100; slots[i].drop != want {
			t.Errorf("ACK %d (ack %d): dropped %v, want %v", i, acks[i], slots[i].drop, want)
		}
	}
}

// FuzzClassifyACK: any frame is classified without panicking, and only a
// frame that is really a pure ACK (flags exactly ACK, no payload) is ever
// declared filterable.
func FuzzClassifyACK(f *testing.F) {
	f.Add(ackFrame(seg{ack: 5, flags: header.TCPFlagAck}))
	f.Add(ackFrame(seg{v6: true, ack: 5, flags: header.TCPFlagAck, opts: tsOpt}))
	f.Add(ackFrame(seg{ack: 5, flags: header.TCPFlagAck, data: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := classifyACK(b)
		if !a.ok {
			return
		}
		h, err := pkt.Parse(b)
		if err != nil {
			t.Fatalf("filterable but unparsable: %v", err)
		}
		tcp := b[h.L4:h.IPEnd]
		if tcp[13] != 0x10 || int(tcp[12]>>4)*4 != len(tcp) {
			t.Fatalf("filterable but flags %#x, data offset %d of %d bytes", tcp[13], tcp[12]>>4, len(tcp))
		}
	})
}

// TestAckKeySameIsEquality: ackKey.same agrees with == for equal keys and
// for keys that differ in any one word.
func TestAckKeySameIsEquality(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for iter := 0; iter < 2000; iter++ {
		var a ackKey
		w := (*[10]uint32)(unsafe.Pointer(&a))
		for i := range w {
			w[i] = rng.Uint32()
		}
		b := a
		if !a.same(&b) || a != b {
			t.Fatalf("equal keys: same %v", a.same(&b))
		}
		wb := (*[10]uint32)(unsafe.Pointer(&b))
		wb[iter%10] ^= 1 << (iter % 32)
		if a.same(&b) || a == b {
			t.Fatalf("keys differing in word %d: same %v", iter%10, a.same(&b))
		}
	}
}
