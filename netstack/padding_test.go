package netstack_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// scriptDevice hands the endpoint the frames a test queues, all in one
// receive batch per Push, and passes every transmitted frame to sent.
type scriptDevice struct {
	mu     sync.Mutex
	queue  [][]byte
	ready  chan struct{}
	sent   chan []byte
	txDone func(any, error)
}

type scriptFrame []byte

func (f scriptFrame) Bytes() []byte                  { return f }
func (f scriptFrame) Verified() (bool, bool)         { return false, false }
func (f scriptFrame) Release() error                 { return nil }
func (d *scriptDevice) SetTxDone(f func(any, error)) { d.txDone = f }
func (d *scriptDevice) Full(error) bool              { return false }
func (d *scriptDevice) RxReady() <-chan struct{}     { return d.ready }
func (d *scriptDevice) Poll()                        {}
func (d *scriptDevice) Close() error                 { return nil }
func (d *scriptDevice) Info() netstack.DeviceInfo {
	return netstack.DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxFrame: 1518}
}
func (d *scriptDevice) Transmit(frags [][]byte, _ bool, cookie any) error {
	d.sent <- bytes.Join(frags, nil)
	go d.txDone(cookie, nil)
	return nil
}
func (d *scriptDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error {
	panic("no GSO advertised")
}
func (d *scriptDevice) Receive() (netstack.Frame, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queue) == 0 {
		return nil, nil
	}
	f := d.queue[0]
	d.queue = d.queue[1:]
	return scriptFrame(f), nil
}

// Push queues frames to be received in one batch.
func (d *scriptDevice) Push(frames ...[]byte) {
	d.mu.Lock()
	d.queue = append(d.queue, frames...)
	d.mu.Unlock()
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

var (
	padHostMAC  = [6]byte{2, 0, 0, 0, 0, 1}
	padPeerMAC  = [6]byte{0x52, 0x55, 10, 0, 0, 2}
	padHostAddr = tcpip.AddrFrom4([4]byte{10, 0, 0, 1})
	padPeerAddr = tcpip.AddrFrom4([4]byte{10, 0, 0, 2})
)

// tcpFrame builds an Ethernet frame from the peer with one TCP segment,
// padded with zeros to Ethernet's 60-byte minimum as a NIC (and QEMU's
// user network) does.
func tcpFrame(seq, ack uint32, flags header.TCPFlags, opts, payload []byte) []byte {
	return tcpFrameWin(seq, ack, flags, 65535, opts, payload)
}

// tcpFrameWin is tcpFrame announcing window win.
func tcpFrameWin(seq, ack uint32, flags header.TCPFlags, win uint16, opts, payload []byte) []byte {
	tcpLen := header.TCPMinimumSize + len(opts)
	ipLen := header.IPv4MinimumSize + tcpLen + len(payload)
	f := make([]byte, max(header.EthernetMinimumSize+ipLen, 60))
	copy(f[0:], padHostMAC[:])
	copy(f[6:], padPeerMAC[:])
	binary.BigEndian.PutUint16(f[12:], uint16(header.IPv4ProtocolNumber))
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: padPeerAddr, DstAddr: padHostAddr})
	ip.SetChecksum(^ip.CalculateChecksum())
	t := header.TCP(ip[header.IPv4MinimumSize:])
	t.Encode(&header.TCPFields{SrcPort: 58002, DstPort: 5001, SeqNum: seq, AckNum: ack,
		DataOffset: uint8(tcpLen), Flags: flags, WindowSize: win})
	copy(t[header.TCPMinimumSize:], opts)
	copy(t[tcpLen:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, padPeerAddr, padHostAddr, uint16(tcpLen+len(payload)))
	t.SetChecksum(^checksum.Checksum(t[:tcpLen+len(payload)], xsum))
	return f
}

// nextTCP returns the next TCP segment the stack sends to the peer.
func nextTCP(t *testing.T, d *scriptDevice) header.TCP {
	t.Helper()
	for {
		select {
		case f := <-d.sent:
			if binary.BigEndian.Uint16(f[12:]) != uint16(header.IPv4ProtocolNumber) {
				continue
			}
			ip := header.IPv4(f[header.EthernetMinimumSize:])
			if ip.TransportProtocol() != header.TCPProtocolNumber {
				continue
			}
			return header.TCP(ip.Payload())
		case <-time.After(30 * time.Second):
			t.Fatal("the stack sent no TCP segment in 30 s")
		}
	}
}

// A pure ACK is a 54-byte frame, padded to 60 on the wire. In the QEMU
// soak, slirp sent a guest still in SYN-RECEIVED its first 1460 bytes
// and then, on the guest's retransmitted SYN-ACK, a pure ACK whose
// sequence number is the next byte; both waited in the RX ring and came
// up in one batch. gVisor's GRO merged the ACK into the data segment,
// counting the 6 padding bytes as payload (it takes the length from the
// buffer, not the IP header) and adding them to the IP total length:
// the stack received 1466 bytes, the last 6 zeros, and acknowledged 6
// bytes the peer never sent, which wedged the connection (the peer
// drops acknowledgements of unsent data). The endpoint must hand up the
// IP datagram only, without the link layer's padding.
func TestEthernetPaddingIsNotPayload(t *testing.T) {
	dev := &scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 64)}
	ep, err := netstack.New(netstack.Options{Device: dev, GRO: true, AckFilter: true})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	defer s.Destroy()
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: padHostAddr, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	if err := s.AddStaticNeighbor(1, ipv4.ProtocolNumber, padPeerAddr, tcpip.LinkAddress(padPeerMAC[:])); err != nil {
		t.Fatal(err)
	}
	ln, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Addr: padHostAddr, Port: 5001}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	const iss = 17088001
	mss := []byte{2, 4, 0x05, 0xB4} // MSS 1460, as slirp sends
	dev.Push(tcpFrame(iss, 0, header.TCPFlagSyn, mss, nil))
	synack := nextTCP(t, dev)
	if synack.Flags() != header.TCPFlagSyn|header.TCPFlagAck || synack.AckNumber() != iss+1 {
		t.Fatalf("want a SYN-ACK of %d, got flags %v ack %d", iss+1, synack.Flags(), synack.AckNumber())
	}
	giss := synack.SequenceNumber()
	dev.Push(tcpFrame(iss+1, giss+1, header.TCPFlagAck, nil, nil))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	data := make([]byte, 1460)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	// One batch: the data segment and a pure ACK at the next sequence
	// number, same acknowledgement, same flags: all GRO asks to merge.
	ack := tcpFrame(iss+1+1460, giss+1, header.TCPFlagAck, nil, nil)
	if len(ack) != 60 {
		t.Fatalf("the pure ACK frame is %d bytes, want 60 (padded)", len(ack))
	}
	dev.Push(tcpFrame(iss+1, giss+1, header.TCPFlagAck, nil, data), ack)

	// The stack's acknowledgement says how much it took as data.
	for {
		seg := nextTCP(t, dev)
		if seg.Flags()&header.TCPFlagAck == 0 || seg.AckNumber() == iss+1 {
			continue
		}
		if got, want := seg.AckNumber()-(iss+1), uint32(len(data)); got != want {
			t.Errorf("the stack acknowledged %d bytes, the peer sent %d", got, want)
		}
		break
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(data) || !bytes.Equal(buf[:n], data) {
		t.Errorf("read %d bytes (%x...), want the %d bytes sent", n, buf[max(0, n-8):n], len(data))
	}
	if st := ep.Stats(); st.RxPackets != 4 {
		t.Logf("endpoint: %+v", st)
	}
}
