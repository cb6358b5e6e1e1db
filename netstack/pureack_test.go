package netstack_test

import (
	"fmt"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/netstack"
)

// scriptConn is one TCP connection between a gVisor stack on a
// scriptDevice (the host, listening on 5001) and the test, which plays the
// peer frame by frame.
type scriptConn struct {
	dev  *scriptDevice
	ep   *netstack.Endpoint
	s    *stack.Stack
	c    *gonet.TCPConn
	iss  uint32 // the peer's initial sequence number
	giss uint32 // the host's
}

// newScriptConn sets up the host and completes a handshake in which the
// peer announces window win.
func newScriptConn(t *testing.T, o netstack.Options, win uint16) *scriptConn {
	dev := &scriptDevice{ready: make(chan struct{}, 1), sent: make(chan []byte, 1024)}
	o.Device = dev
	ep, err := netstack.New(o)
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	t.Cleanup(s.Destroy)
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
	t.Cleanup(func() { ln.Close() })
	const iss = 50001
	dev.Push(tcpFrameWin(iss, 0, header.TCPFlagSyn, win, []byte{2, 4, 0x05, 0xB4}, nil))
	synack := nextTCP(t, dev)
	if synack.Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("want a SYN-ACK, got %v", synack.Flags())
	}
	giss := synack.SequenceNumber()
	dev.Push(tcpFrameWin(iss+1, giss+1, header.TCPFlagAck, win, nil, nil))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &scriptConn{dev: dev, ep: ep, s: s, c: c.(*gonet.TCPConn), iss: iss + 1, giss: giss + 1}
}

// pureACKModes are the receive configurations the pure-ACK tests run in.
var pureACKModes = []netstack.Options{{}, {GRO: true}, {AckFilter: true}, {GRO: true, AckFilter: true}}

// A window update that follows a data segment of its connection in one
// receive batch must reach TCP with its own header. gVisor's GRO merges a
// segment without data into the held segment before it when the sequence
// number follows on and the acknowledgement, flags and options match
// (stack/gro shouldFlushTCP; it flushes only after merging), and the
// merged packet keeps the first header: the window the update opened was
// lost, and the host, facing a closed window, sent nothing but zero-window
// probes (the issue saw 1 s without data).
//
// The peer opens with a zero window, the host's application writes, and
// the peer sends, in one batch, 100 bytes (no PSH: GRO holds them) and a
// pure ACK opening its window. Everything the host sends that acknowledges
// the 100 bytes is read: data must come before any zero-window probe.
func TestWindowUpdateBehindDataReachesTCP(t *testing.T) {
	for _, o := range pureACKModes {
		t.Run(fmt.Sprintf("gro=%v/ackfilter=%v", o.GRO, o.AckFilter), func(t *testing.T) {
			sc := newScriptConn(t, o, 0)
			if _, err := sc.c.Write(make([]byte, 4000)); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 100)
			sc.dev.Push(
				tcpFrameWin(sc.iss, sc.giss, header.TCPFlagAck, 0, nil, data),
				tcpFrameWin(sc.iss+100, sc.giss, header.TCPFlagAck, 65535, nil, nil),
			)
			for {
				seg := nextTCP(t, sc.dev)
				if seg.AckNumber() != sc.iss+100 {
					continue // before the batch (a probe on the handshake's window)
				}
				if len(seg.Payload()) == 0 {
					continue // the acknowledgement of the 100 bytes
				}
				if seg.SequenceNumber() != sc.giss {
					t.Fatalf("the host sent a zero-window probe (seq %d, una %d), not data: the window update was lost (endpoint %+v)",
						seg.SequenceNumber(), sc.giss, sc.ep.Stats())
				}
				break
			}
		})
	}
}

// Three duplicate ACKs that follow a data segment of their connection in
// one receive batch must each reach TCP, for its fast retransmit. Merged
// by gVisor's GRO, the first was lost in the data segment (which, carrying
// data, is no duplicate ACK): two duplicates, no fast retransmit, and the
// sender waited for its retransmission timeout.
//
// The host sends 4000 bytes; the peer, as if the second segment were lost,
// sends in one batch 100 bytes of its own (no PSH) acknowledging the first
// segment and three pure ACKs of the same number. (NewReno never fast
// retransmits the first segment of a connection: RFC 6582 3.2 step 2,
// snd.go detectLoss.) The host's next segment at the lost sequence number
// must be a fast retransmission, not a timeout's.
func TestDuplicateACKsBehindDataReachTCP(t *testing.T) {
	for _, o := range pureACKModes {
		t.Run(fmt.Sprintf("gro=%v/ackfilter=%v", o.GRO, o.AckFilter), func(t *testing.T) {
			sc := newScriptConn(t, o, 65535)
			if _, err := sc.c.Write(make([]byte, 4000)); err != nil {
				t.Fatal(err)
			}
			first := 0
			for got := 0; got < 4000; { // everything sent once
				n := len(nextTCP(t, sc.dev).Payload())
				if first == 0 {
					first = n
				}
				got += n
			}
			lost := sc.giss + uint32(first)
			dup := tcpFrameWin(sc.iss+100, lost, header.TCPFlagAck, 65535, nil, nil)
			sc.dev.Push(tcpFrameWin(sc.iss, lost, header.TCPFlagAck, 65535, nil, make([]byte, 100)), dup, dup, dup)
			for {
				seg := nextTCP(t, sc.dev)
				if seg.SequenceNumber() == lost && len(seg.Payload()) > 0 {
					break
				}
			}
			// gVisor counts a fast retransmit just after sending it (a
			// timeout just before): wait for the count, not for a time.
			ts := sc.s.Stats().TCP
			for deadline := time.Now().Add(30 * time.Second); ts.FastRetransmit.Value()+ts.Timeouts.Value() == 0; {
				if time.Now().After(deadline) {
					t.Fatal("a retransmission was sent but never counted")
				}
				time.Sleep(time.Millisecond)
			}
			if ts.FastRetransmit.Value() != 1 || ts.Timeouts.Value() != 0 {
				t.Fatalf("the retransmission came with %d fast retransmits and %d timeouts: the duplicate ACKs did not all reach TCP (endpoint %+v)",
					ts.FastRetransmit.Value(), ts.Timeouts.Value(), sc.ep.Stats())
			}
		})
	}
}

// The same for a window update carried by data: gVisor's GRO merges
// in-order data segments whatever their windows (shouldFlushTCP compares
// flags, acknowledgement, options and sequence, not the window; Linux's
// tcp_gro_receive flushes on a different window, its flag word), and the
// merged packet keeps the first one's. The peer opens with a zero window
// and sends, in one batch, 100 bytes announcing none and 100 more opening
// 64 KiB: the host must send data, not a zero-window probe.
func TestWindowUpdateOnDataBehindDataReachesTCP(t *testing.T) {
	for _, o := range pureACKModes {
		t.Run(fmt.Sprintf("gro=%v/ackfilter=%v", o.GRO, o.AckFilter), func(t *testing.T) {
			sc := newScriptConn(t, o, 0)
			if _, err := sc.c.Write(make([]byte, 4000)); err != nil {
				t.Fatal(err)
			}
			sc.dev.Push(
				tcpFrameWin(sc.iss, sc.giss, header.TCPFlagAck, 0, nil, make([]byte, 100)),
				tcpFrameWin(sc.iss+100, sc.giss, header.TCPFlagAck, 65535, nil, make([]byte, 100)),
			)
			for {
				seg := nextTCP(t, sc.dev)
				if seg.AckNumber() != sc.iss+200 || len(seg.Payload()) == 0 {
					continue // before the batch, or the acknowledgement
				}
				if seg.SequenceNumber() != sc.giss {
					t.Fatalf("the host sent a zero-window probe (seq %d, una %d), not data: the window update was lost (endpoint %+v)",
						seg.SequenceNumber(), sc.giss, sc.ep.Stats())
				}
				break
			}
		})
	}
}
