package netstack_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/netstack"
)

// verifiedFrame is a received frame whose checksums the hardware reports
// checked and good.
type verifiedFrame []byte

func (f verifiedFrame) Bytes() []byte          { return f }
func (f verifiedFrame) Verified() (bool, bool) { return true, true }
func (f verifiedFrame) Release() error         { return nil }

// verifiedDevice is a scriptDevice whose frames all come with the
// hardware's "checked and good".
type verifiedDevice struct{ scriptDevice }

func (d *verifiedDevice) Receive() (netstack.Frame, error) {
	f, err := d.scriptDevice.Receive()
	if f == nil || err != nil {
		return f, err
	}
	return verifiedFrame(f.(scriptFrame)), nil
}

var (
	hwHostAddr = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	hwPeerAddr = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
)

// udp6Frame is an Ethernet frame from the peer with an IPv6 header whose
// next header is first, then ext, then a UDP datagram to port 7 with a
// valid checksum.
func udp6Frame(first byte, ext, payload []byte) []byte {
	u := make([]byte, header.UDPMinimumSize+len(payload))
	header.UDP(u).Encode(&header.UDPFields{SrcPort: 9, DstPort: 7, Length: uint16(len(u))})
	copy(u[header.UDPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, hwPeerAddr, hwHostAddr, uint16(len(u)))
	header.UDP(u).SetChecksum(^checksum.Checksum(u, xsum))
	f := make([]byte, header.EthernetMinimumSize+header.IPv6MinimumSize)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(padPeerMAC[:]),
		DstAddr: tcpip.LinkAddress(padHostMAC[:]), Type: header.IPv6ProtocolNumber})
	header.IPv6(f[header.EthernetMinimumSize:]).Encode(&header.IPv6Fields{PayloadLength: uint16(len(ext) + len(u)),
		TransportProtocol: tcpip.TransportProtocolNumber(first), HopLimit: 64, SrcAddr: hwPeerAddr, DstAddr: hwHostAddr})
	return append(append(f, ext...), u...)
}

// A NIC's "transport checksum good" is trusted only where the NIC and
// gVisor cannot disagree on where the transport header is: right behind
// the IPv6 header. The experiment header 253 is read by gVisor as 8
// bytes whatever its length field says; a NIC that walks it as RFC 8200
// 4.8 describes (8 + 8 x length) checks a datagram 8 bytes further on. The
// frame below carries both: a valid UDP datagram where such a NIC looks,
// and a UDP header with a bad checksum where gVisor looks. Trusted, the
// hardware's verdict delivered gVisor's datagram unchecked. The ENET
// inspects only the fixed IPv6 header (its reference manual's IPv6
// receive processing; the K60's, the same IP block, says so), so it never
// claims such a frame; the endpoint must not depend on that.
func TestHardwareVerdictBehindExtensionHeadersIsNotTrusted(t *testing.T) {
	dev := &verifiedDevice{scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 64)}}
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

	// gVisor's view: 253 (8 bytes), then UDP header {9, 7, len 16,
	// checksum 0xBAD0} and 8 bytes "gvisor!!". An RFC-walking NIC's view:
	// 253 with length 1 (16 bytes), then a valid UDP datagram.
	rfc := udp6Frame(253, make([]byte, 16), []byte("hardware"))
	ext := rfc[header.EthernetMinimumSize+header.IPv6MinimumSize:][:16]
	ext[0], ext[1] = byte(header.UDPProtocolNumber), 1
	copy(ext[8:], []byte{0, 9, 0, 7, 0, 16, 0xBA, 0xD0})
	// gVisor's datagram runs to the end of the frame: its length is 16 +
	// the NIC's datagram.
	binary.BigEndian.PutUint16(ext[12:], uint16(8+header.UDPMinimumSize+len("hardware")))
	sentinel := udp6Frame(byte(header.UDPProtocolNumber), nil, []byte("sentinel"))
	dev.Push(rfc, sentinel)

	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // ends a failed test only
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], []byte("sentinel")) {
		t.Fatalf("a datagram whose checksum nobody checked was delivered: %q (endpoint %+v)", buf[:n], ep.Stats())
	}
}
