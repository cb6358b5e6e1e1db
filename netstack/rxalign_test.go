package netstack

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// TestAlignedViewPlacesFramesAtIPAlign checks that a received frame is
// copied whole into a view whose first byte lies rxAlign bytes past a word
// boundary (so its IP header, 14 bytes on, is word aligned, as the ENET's
// SHIFT16 buffers are), for every frame length the MAC hands up.
func TestAlignedViewPlacesFramesAtIPAlign(t *testing.T) {
	src := make([]byte, 2+1522)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	for _, n := range []int{14, 60, 64, 66, 127, 128, 1514, 1518, 1522} {
		b := src[2 : 2+n]
		v := alignedView(b)
		got := v.AsSlice()
		if !bytes.Equal(got, b) {
			t.Fatalf("%d-byte frame: view holds %d different bytes", n, len(got))
		}
		if a := (uintptr(unsafe.Pointer(&got[0])) + 14) & 3; a != 0 {
			t.Errorf("%d-byte frame: its IP header starts %d bytes past a word", n, a)
		}
		v.Release()
	}
}

// scribbledFrame is a Frame whose Release overwrites its bytes, as a
// device that reuses the buffer at once would.
type scribbledFrame struct{ b []byte }

func (f *scribbledFrame) Bytes() []byte             { return f.b }
func (f *scribbledFrame) Verified() (ipv4, l4 bool) { return false, false }
func (f *scribbledFrame) Release() error            { clear(f.b); return nil }

// pktTypeRecorder is a NetworkDispatcher that keeps what it is handed.
type pktTypeRecorder struct {
	types []tcpip.PacketType
	heads [][]byte
}

func (r *pktTypeRecorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, p *stack.PacketBuffer) {
	r.types = append(r.types, p.PktType)
	r.heads = append(r.heads, p.Data().AsRange().ToSlice())
}

func (r *pktTypeRecorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestDeliverReadsNothingAfterRelease checks that deliver classifies and
// hands up a frame from its copy, not from the device buffer it released.
func TestDeliverReadsNothingAfterRelease(t *testing.T) {
	mac := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
	f := make([]byte, 60)
	copy(f, mac)
	copy(f[6:], "\x02\x00\x00\x00\x00\x02")
	f[12], f[13] = 0x08, 0x00
	for i := 14; i < len(f); i++ {
		f[i] = byte(i)
	}
	want := append([]byte(nil), f[14:]...)
	var e Endpoint
	var r pktTypeRecorder
	e.deliver(&r, &scribbledFrame{b: f}, mac)
	if len(r.types) != 1 {
		t.Fatalf("%d packets handed up, want 1", len(r.types))
	}
	if r.types[0] != tcpip.PacketHost {
		t.Errorf("frame to our address classified as packet type %d, want PacketHost", r.types[0])
	}
	if !bytes.Equal(r.heads[0], want) {
		t.Errorf("handed up % x, want % x", r.heads[0], want)
	}
}

// FuzzDeliverCopiesWhatArrived hands deliver arbitrary frames from a device
// that scribbles over each buffer it gets back: every frame is either
// counted (runt, unknown EtherType) or handed up with exactly the bytes
// that arrived after its Ethernet header.
func FuzzDeliverCopiesWhatArrived(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00payload"))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x02\x08\x06arp"))
	f.Add([]byte("short"))
	f.Add(make([]byte, 1514))
	f.Fuzz(func(t *testing.T, frame []byte) {
		mac := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
		want := append([]byte(nil), frame...)
		var e Endpoint
		var r pktTypeRecorder
		e.deliver(&r, &scribbledFrame{b: frame}, mac)
		st := e.stats.Stats
		switch {
		case len(want) < 14:
			if len(r.types) != 0 || st.RxRunts != 1 {
				t.Fatalf("%d-byte runt: %d handed up, %d counted", len(want), len(r.types), st.RxRunts)
			}
		case string(want[12:14]) != "\x08\x00" && string(want[12:14]) != "\x86\xdd" && string(want[12:14]) != "\x08\x06":
			if len(r.types) != 0 || st.RxUnknownType != 1 {
				t.Fatalf("EtherType % x: %d handed up, %d counted", want[12:14], len(r.types), st.RxUnknownType)
			}
		default:
			if len(r.types) != 1 || !bytes.Equal(r.heads[0], want[14:]) {
				t.Fatalf("%d-byte frame: handed up %d packets, first % x", len(want), len(r.types), r.heads)
			}
		}
	})
}

// shifted returns a copy of frame placed 2 bytes past a word boundary, as
// the ENET's SHIFT16 buffers hold received frames.
func shifted(frame []byte) []byte {
	buf := make([]byte, len(frame)+4)
	return append(buf[2:2], frame...)
}

// TestCopyVerifiedCatchesEveryBitFlip: a received TCP segment (IPv4 and
// IPv6, full-sized, at the ENET's offset) whose checksum is verified on
// the sum taken while copying passes whole, and any single flipped bit in
// its TCP header or payload gets it dropped with no view left behind.
func TestCopyVerifiedCatchesEveryBitFlip(t *testing.T) {
	payload := make([]byte, 1440)
	for i := range payload {
		payload[i] = byte(i*31 + i>>4)
	}
	var e Endpoint
	for _, v6 := range []bool{false, true} {
		frame := shifted(testTCPFrame(v6, payload))
		var h pkt.Headers
		v, verd := e.copyVerified(&h, frame, false, false)
		if verd != verdictSoft || v == nil || !bytes.Equal(v.AsSlice(), frame) {
			t.Fatalf("v6 %v: a valid segment got verdict %d", v6, verd)
		}
		v.Release()
		for i := h.L4; i < len(frame); i++ {
			for bit := 0; bit < 8; bit += 3 {
				frame[i] ^= 1 << bit
				if v, verd := e.copyVerified(&h, frame, false, false); verd != verdictBad || v != nil {
					t.Fatalf("v6 %v: bit %d of byte %d flipped: verdict %d, view %v", v6, bit, i, verd, v != nil)
				}
				frame[i] ^= 1 << bit
			}
		}
		// Verified by the hardware: passed without a sum, still copied whole.
		v, verd = e.copyVerified(&h, frame, true, true)
		if verd != verdictHW || !bytes.Equal(v.AsSlice(), frame) {
			t.Fatalf("v6 %v: hardware-verified segment: verdict %d", v6, verd)
		}
		v.Release()
	}
}

// testTCPFrame is an Ethernet frame carrying a TCP segment with a valid
// checksum (computed by gVisor's checksum package, not ours) over IPv4 or
// IPv6.
func testTCPFrame(v6 bool, payload []byte) []byte {
	var src, dst tcpip.Address
	l3, typ := header.IPv4MinimumSize, header.IPv4ProtocolNumber
	if v6 {
		src = tcpip.AddrFrom16([16]byte{0xfe, 0x80, 15: 2})
		dst = tcpip.AddrFrom16([16]byte{0xfe, 0x80, 15: 1})
		l3, typ = header.IPv6MinimumSize, header.IPv6ProtocolNumber
	} else {
		src = tcpip.AddrFrom4([4]byte{10, 0, 0, 2})
		dst = tcpip.AddrFrom4([4]byte{10, 0, 0, 1})
	}
	tcpLen := header.TCPMinimumSize + len(payload)
	f := make([]byte, max(header.EthernetMinimumSize+l3+tcpLen, 60))
	copy(f, "\x02\x00\x00\x00\x00\x01\x52\x55\x0a\x00\x00\x02")
	binary.BigEndian.PutUint16(f[12:], uint16(typ))
	ipb := f[header.EthernetMinimumSize:]
	if v6 {
		header.IPv6(ipb).Encode(&header.IPv6Fields{PayloadLength: uint16(tcpLen),
			TransportProtocol: header.TCPProtocolNumber, HopLimit: 64, SrcAddr: src, DstAddr: dst})
	} else {
		ip := header.IPv4(ipb)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(l3 + tcpLen), TTL: 64,
			Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	tc := header.TCP(ipb[l3 : l3+tcpLen])
	tc.Encode(&header.TCPFields{SrcPort: 58002, DstPort: 5001, SeqNum: 1, AckNum: 2,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 65535})
	copy(tc[header.TCPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(tcpLen))
	tc.SetChecksum(^checksum.Checksum(tc, xsum))
	return f
}

// FuzzCopyVerifiedMatchesSoftVerify: for any frame and hardware verdicts,
// the receive path's one-pass copy and check (copyVerified) reaches
// softVerify's verdict, which sums the frame in place, and when it keeps
// the frame its view holds exactly the IP datagram's bytes.
func FuzzCopyVerifiedMatchesSoftVerify(f *testing.F) {
	payload := make([]byte, 1200)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, v6 := range []bool{false, true} {
		good := testTCPFrame(v6, payload)
		f.Add(good, uint8(0), false, false)
		bad := append([]byte(nil), good...)
		bad[len(bad)-100] ^= 0x40
		f.Add(bad, uint8(2), false, false)
		f.Add(bad, uint8(2), true, true)
		f.Add(good[:80], uint8(3), false, false)
	}
	f.Add(testTCPFrame(false, nil), uint8(1), true, false) // padded to 60 bytes
	f.Fuzz(func(t *testing.T, frame []byte, off uint8, ipOK, l4OK bool) {
		buf := make([]byte, len(frame)+8)
		b := buf[off%8 : int(off%8)+len(frame)]
		copy(b, frame)
		var e Endpoint
		h, want := e.softVerify(b, ipOK, l4OK)
		var h2 pkt.Headers
		v, got := e.copyVerified(&h2, b, ipOK, l4OK)
		if got != want || h2 != h {
			t.Fatalf("copyVerified says %d, softVerify %d (headers %+v / %+v)", got, want, h2, h)
		}
		if got == verdictBad {
			if v != nil {
				t.Fatal("a bad frame kept its view")
			}
			return
		}
		if !bytes.Equal(v.AsSlice(), frame[:h.IPEnd]) {
			t.Fatalf("view holds % x, want the datagram % x", v.AsSlice(), frame[:h.IPEnd])
		}
		v.Release()
		// Independently of package pkt's sums: a segment kept on a checksum
		// checked here verifies with gVisor's checksum package too.
		if !l4OK && !h.Fragment && (h.Proto == pkt.ProtoTCP || h.Proto == pkt.ProtoUDP) {
			if !gvisorTransportOK(frame[:h.IPEnd], h) {
				t.Fatalf("kept a segment gVisor's checksum rejects (headers %+v)", h)
			}
		}
	})
}

// gvisorTransportOK verifies the TCP or UDP checksum of datagram f (headers
// h) with gVisor's header and checksum packages; IPv4 UDP without a
// checksum passes.
func gvisorTransportOK(f []byte, h pkt.Headers) bool {
	seg := f[h.L4:]
	if h.Proto == pkt.ProtoUDP && !h.IPv6 && len(seg) >= 8 && binary.BigEndian.Uint16(seg[6:]) == 0 {
		return true
	}
	var src, dst tcpip.Address
	if h.IPv6 {
		ip := header.IPv6(f[h.L3:])
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	} else {
		ip := header.IPv4(f[h.L3:])
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	}
	xsum := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(h.Proto), src, dst, uint16(len(seg)))
	return checksum.Checksum(seg, xsum) == 0xFFFF
}
