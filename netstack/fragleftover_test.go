package netstack_test

// Hostile fragment and GRO sequences an independent review of issue 26
// found (each failed before its fix): a fragment gVisor drops before its
// reassembler leaves the rest of its datagram there, and with gVisor's
// IPv4 ID 0 the next datagram completes those leftovers, which must never
// go up as verified; one peer's first fragments must not evict another's;
// a window update carried by data behind data in one batch reaches TCP.

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/netstack"
)

// frag6Frame is an Ethernet frame from the peer: an IPv6 header, a
// fragment header (next header next, offset off bytes, more, id) and
// the fragmentable bytes b.
func frag6Frame(next byte, off int, more bool, id uint32, b []byte) []byte {
	fh := make([]byte, 8)
	fh[0] = next
	fo := uint16(off)
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(fh[2:], fo)
	binary.BigEndian.PutUint32(fh[4:], id)
	f := make([]byte, header.EthernetMinimumSize+header.IPv6MinimumSize)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(padPeerMAC[:]),
		DstAddr: tcpip.LinkAddress(padHostMAC[:]), Type: header.IPv6ProtocolNumber})
	header.IPv6(f[header.EthernetMinimumSize:]).Encode(&header.IPv6Fields{PayloadLength: uint16(8 + len(b)),
		TransportProtocol: tcpip.TransportProtocolNumber(header.IPv6FragmentExtHdrIdentifier), HopLimit: 64, SrcAddr: hwPeerAddr, DstAddr: hwHostAddr})
	f = append(append(f, fh...), b...)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}

// fragCheck hands a datagram it could not verify up fragment by fragment
// with no verdict, and a datagram it verified up "verified"; both assume
// gVisor's reassembler then holds exactly the set the endpoint saw. It
// does not when gVisor drops one fragment of the set on its own: here the
// first fragment, whose fragmentable part is a destination options header
// followed by no-next-header 59 (ipv6.go processFragmentExtHdr: a first
// fragment must end in an upper-layer header, else it is dropped before
// Process). gVisor keeps the second fragment (32 junk bytes) in its
// reassembler. The next datagram with the same ID, which the endpoint
// verifies and hands up verified, completes gVisor's reassembly with its
// own first fragment and the stale junk (reassembler.go process: the
// first fragment's clone carries RXChecksumValidated, the later one is
// taken as it is), and UDP delivers it unchecked.
//
// Run: go test -count=1 -run TestStaleFragmentNeverCompletesAVerifiedDatagram ./netstack/
func TestStaleFragmentNeverCompletesAVerifiedDatagram(t *testing.T) {
	dev := &scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 64)}
	ep, err := netstack.New(netstack.Options{Device: dev, GRO: true})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	defer s.Destroy()
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: hwHostAddr, PrefixLen: 64}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	c, err := gonet.DialUDP(s, &tcpip.FullAddress{NIC: 1, Addr: hwHostAddr, Port: 7}, nil, ipv6.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const id = 0x1234
	// Datagram 1: fragmentable part = destination options (next 59, PadN)
	// + 8 bytes, then 32 junk bytes.
	d1first := append([]byte{59, 0, 1, 4, 0, 0, 0, 0}, bytes.Repeat([]byte{'j'}, 8)...)
	d1second := bytes.Repeat([]byte{'X'}, 32)
	// Datagram 2: a valid UDP datagram to port 7 of 8 + 40 bytes.
	payload := append(bytes.Repeat([]byte{'G'}, 8), bytes.Repeat([]byte{'g'}, 32)...)
	u := make([]byte, header.UDPMinimumSize+len(payload))
	header.UDP(u).Encode(&header.UDPFields{SrcPort: 9, DstPort: 7, Length: uint16(len(u))})
	copy(u[header.UDPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, hwPeerAddr, hwHostAddr, uint16(len(u)))
	header.UDP(u).SetChecksum(^checksum.Checksum(u, xsum))
	sentinel := udp6Frame(byte(header.UDPProtocolNumber), nil, []byte("sentinel"))
	dev.Push(
		frag6Frame(60, 0, true, id, d1first),
		frag6Frame(60, 16, false, id, d1second),
		frag6Frame(byte(header.UDPProtocolNumber), 0, true, id, u[:16]),
		frag6Frame(byte(header.UDPProtocolNumber), 16, false, id, u[16:]),
		sentinel,
	)
	buf := make([]byte, 2048)
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // ends a failed test only
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		got := buf[:n]
		if bytes.Equal(got, []byte("sentinel")) {
			return
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("a datagram nobody checked was delivered as verified: %q, sent %q (endpoint %+v)", got, payload, ep.Stats())
		}
	}
}

// gVisor's GRO merges a data segment into the held one when sequence,
// acknowledgement, flags (but FIN/PSH/CWR), data offset and options match
// (stack/gro/gro.go shouldFlushTCP): it never compares the window, and the
// merged packet keeps the first segment's header. Linux flushes instead
// (tcp_offload.c tcp_gro_receive: the flag word it compares includes the
// window). So a window update carried by a data segment, behind another
// data segment of its flow in one batch, is lost: the host still sees the
// closed window and sends a zero-window probe, not data. groOrder keeps
// segments without data out of GRO behind data (item 3), but not a data
// segment that changes the window.
//
// Run: go test -count=1 -run TestWindowUpdateInDataSegmentBatchReachesTCP ./netstack/
func TestWindowUpdateInDataSegmentBatchReachesTCP(t *testing.T) {
	for _, o := range []netstack.Options{{}, {GRO: true}, {GRO: true, AckFilter: true}} {
		t.Run(map[bool]string{false: "nogro", true: "gro"}[o.GRO]+map[bool]string{false: "", true: "+ackfilter"}[o.AckFilter], func(t *testing.T) {
			sc := newScriptConn(t, o, 0)
			if _, err := sc.c.Write(make([]byte, 4000)); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 100)
			sc.dev.Push(
				tcpFrameWin(sc.iss, sc.giss, header.TCPFlagAck, 0, nil, data),
				tcpFrameWin(sc.iss+100, sc.giss, header.TCPFlagAck, 65535, nil, data),
			)
			for {
				seg := nextTCP(t, sc.dev)
				if seg.AckNumber() != sc.iss+200 {
					continue // before the batch, or an ACK of the first segment alone
				}
				if len(seg.Payload()) > 0 && seg.SequenceNumber() == sc.giss {
					return // data: the window update reached TCP
				}
				if seg.SequenceNumber() == sc.giss-1 {
					t.Fatalf("the host sent a zero-window probe, not data: the window update in the second data segment was lost (endpoint %+v)", sc.ep.Stats())
				}
			}
		})
	}
}

// frag4Frame is an Ethernet frame from the peer with an IPv4 UDP fragment:
// offset off bytes, more, id, fragment payload b.
func frag4Frame(off int, more bool, id uint16, b []byte) []byte {
	f := make([]byte, header.EthernetMinimumSize+header.IPv4MinimumSize)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(padPeerMAC[:]),
		DstAddr: tcpip.LinkAddress(padHostMAC[:]), Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	var flags uint8
	if more {
		flags = header.IPv4FlagMoreFragments
	}
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(header.IPv4MinimumSize + len(b)), ID: id, Flags: flags,
		FragmentOffset: uint16(off), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: padPeerAddr, DstAddr: padHostAddr})
	ip.SetChecksum(^ip.CalculateChecksum())
	f = append(f, b...)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}

// udp4Datagram is a UDP datagram from port 9 to port 7 with a valid
// IPv4 checksum.
func udp4Datagram(payload []byte) []byte {
	u := make([]byte, header.UDPMinimumSize+len(payload))
	header.UDP(u).Encode(&header.UDPFields{SrcPort: 9, DstPort: 7, Length: uint16(len(u))})
	copy(u[header.UDPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, padPeerAddr, padHostAddr, uint16(len(u)))
	header.UDP(u).SetChecksum(^checksum.Checksum(u, xsum))
	return u
}

// The same stale-fragment mix with an ordinary IPv4 UDP datagram: the
// endpoint counts a zero-length last fragment as covering the datagram
// (mergeSpans joins [0,16) and [16,16)) and hands both fragments up
// verified; gVisor drops the zero-length one (ipv4.go HandlePacket: "marked
// as a fragment but has no payload") and keeps the first in its
// reassembler. The next datagram with the same ID is verified by the
// endpoint, but gVisor ignores its first fragment as a duplicate
// (reassembler.go process: a filled hole is kept) and completes the stale
// one with the new second fragment: UDP delivers 8 bytes of the first
// datagram and 32 of the second, unchecked.
//
// Run: go test -count=1 -run TestZeroLengthFragmentLeavesNoVerifiedLeftover ./netstack/
func TestZeroLengthFragmentLeavesNoVerifiedLeftover(t *testing.T) {
	dev := &scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 64)}
	ep, err := netstack.New(netstack.Options{Device: dev, GRO: true})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	defer s.Destroy()
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: padHostAddr, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	c, err := gonet.DialUDP(s, &tcpip.FullAddress{NIC: 1, Addr: padHostAddr, Port: 7}, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const id = 77
	d1 := udp4Datagram([]byte("aaaaaaaa"))                                              // 16 bytes
	d2payload := append(bytes.Repeat([]byte{'G'}, 8), bytes.Repeat([]byte{'g'}, 32)...) // 48-byte datagram
	d2 := udp4Datagram(d2payload)
	sentinel := udp4Datagram([]byte("sentinel"))
	dev.Push(
		frag4Frame(0, true, id, d1),
		frag4Frame(16, false, id, nil),
		frag4Frame(0, true, id, d2[:16]),
		frag4Frame(16, false, id, d2[16:]),
		frag4Frame(0, false, id+1, sentinel),
	)
	buf := make([]byte, 2048)
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // ends a failed test only
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		got := buf[:n]
		if bytes.Equal(got, []byte("sentinel")) {
			return
		}
		if !bytes.Equal(got, d2payload) && !bytes.Equal(got, []byte("aaaaaaaa")) {
			t.Fatalf("a mix of two datagrams was delivered as verified: %q (endpoint %+v)", got, ep.Stats())
		}
	}
}

// Checklist class 2 (every place is shared fairly), in fragCheck: its
// table holds fragTrackers (64) datagrams for all peers together and, when
// full, drops the oldest (fragcheck.go add/drop), not one of the peer
// holding the most. A peer that sends 64 first fragments (64 frames of 60
// bytes) evicts another peer's datagram caught between its fragments; the
// endpoint drops it (RxFragDrops) and gVisor never sees it. gVisor's own
// reassembler, which the endpoint stands in front of in GRO mode, only
// evicts above 4 MiB held (fragmentation.HighFragThreshold).
//
// Run: go test -count=1 -run TestOnePeerCannotEvictAnothersFragments ./netstack/
func TestOnePeerCannotEvictAnothersFragments(t *testing.T) {
	dev := &scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 64)}
	ep, err := netstack.New(netstack.Options{Device: dev, GRO: true})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	defer s.Destroy()
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: padHostAddr, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	c, err := gonet.DialUDP(s, &tcpip.FullAddress{NIC: 1, Addr: padHostAddr, Port: 7}, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	payload := bytes.Repeat([]byte{'B'}, 40)
	d := udp4Datagram(payload)
	frames := [][]byte{frag4Frame(0, true, 500, d[:24])}
	// Another peer (10.0.0.3): 64 first fragments that never complete.
	for i := 0; i < 64; i++ {
		f := frag4Frame(0, true, uint16(i+1), bytes.Repeat([]byte{'x'}, 16))
		ip := header.IPv4(f[header.EthernetMinimumSize:])
		ip.SetSourceAddress(tcpip.AddrFrom4([4]byte{10, 0, 0, 3}))
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
		frames = append(frames, f)
	}
	frames = append(frames, frag4Frame(24, false, 500, d[24:]), frag4Frame(0, false, 501, udp4Datagram([]byte("sentinel"))))
	dev.Push(frames...)
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // ends a failed test only
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], payload) {
		t.Fatalf("peer 10.0.0.2's fragmented datagram was evicted by 64 fragments of 10.0.0.3: first delivered %q (endpoint %+v)", buf[:n], ep.Stats())
	}
}
