package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/qemu"
)

// The wire: QEMU's ENET on a socket netdev in datagram mode
// (-netdev socket,udp=127.0.0.1:<ours>,localaddr=127.0.0.1:<QEMU's>), so
// each UDP datagram between the two loopback ports is one Ethernet frame
// (QEMU net/socket.c, net_socket_send_dgram and
// net_socket_receive_dgram). On our end, one socket carries two users:
//
//   - the benchmark's datagrams, crafted and parsed here as raw frames
//     (Ethernet, IPv4 and UDP headers with their checksums), so that the
//     host's side of the measured path is a sendto or a recvfrom a frame
//     and a sequence number, with no host stack to queue or drop them;
//   - everything else (ARP, the HTTP control connection to /mode, /stats
//     and /pps), handed to a gVisor stack (as the ConnectX
//     co-simulation's WirePeer), which also answers the guest's ARP for
//     our address.
//
// Frames from the guest's benchmark port to ours are consumed here and
// never reach the stack: it would answer each with an ICMP port
// unreachable, a reaction per datagram back into the guest.

// A link is a wire's addresses, on a /24: the firmware's interface is
// built static at guest (no DHCP server on this wire), the peer stack and
// the crafted frames use peer (and peerMAC). The benchmark's datagrams
// come from and go to benchPort (not bound in the stack).
type link struct{ guest, peer netip.Addr }

// enetLink is the ENET's wire (the firmware's ENET1 address, on every
// board), e1000eLink the i.MX7D's 82574L's (its own subnet, as QEMU's
// E1000ENet: the firmware routes each subnet out of its own NIC).
var (
	enetLink   = link{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}
	e1000eLink = link{netip.MustParseAddr(qemu.E1000EGuest), netip.MustParseAddr(qemu.E1000EHost)}
	peerMAC    = tcpip.LinkAddress([]byte{2, 0x70, 0x70, 0x73, 0, 2})
)

// linkBits is every link's prefix length.
const linkBits = 24

const benchPort = 9000

// frameHeader is the Ethernet, IPv4 and UDP headers of a crafted frame.
const frameHeader = header.EthernetMinimumSize + header.IPv4MinimumSize + header.UDPMinimumSize

// Wire is the host's end of the socket netdev.
type Wire struct {
	link  link
	conn  *net.UDPConn
	qemu  *net.UDPAddr // QEMU's localaddr
	Stack *stack.Stack
	ch    *channel.Endpoint
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	guestMAC tcpip.LinkAddress
	ipID     uint16

	// rx is the source session being counted (nil: none); frames to
	// benchPort outside one count in stray.
	rx    atomic.Pointer[seqCounter]
	stray atomic.Int64
}

// newWire opens our end of a wire with addresses l on a free loopback
// port and returns it with the port QEMU is to bind; NetdevArg gives
// QEMU's -netdev argument.
func newWire(l link) (*Wire, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	// A burst from the guest waits here while the reader is descheduled:
	// 4 MiB (the kernel caps it at net.core.rmem_max).
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(4 << 20)
	q, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("wire: %w", err)
	}
	qa := q.LocalAddr().(*net.UDPAddr)
	// QEMU binds it. Between this Close and QEMU's bind another socket
	// may take the port, and QEMU's net_socket_udp_init sets
	// SO_REUSEADDR, so the clash is not reported: the wire would then
	// see no frames or another guest's (different MAC, session ids),
	// and the trials fail rather than count them.
	q.Close()
	w := &Wire{link: l, conn: c, qemu: qa, ch: channel.New(1024, 1500, peerMAC)}
	w.Stack = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := w.Stack.CreateNIC(1, ethernet.New(w.ch)); err != nil {
		return nil, fmt.Errorf("wire: peer NIC: %v", err)
	}
	if err := w.Stack.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(l.peer.As4()), PrefixLen: linkBits}},
		stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("wire: peer address: %v", err)
	}
	pfx := netip.PrefixFrom(l.guest, linkBits).Masked()
	sub, _ := tcpip.NewSubnet(tcpip.AddrFrom4(pfx.Addr().As4()), tcpip.MaskFromBytes(net.CIDRMask(linkBits, 32)))
	w.Stack.SetRouteTable([]tcpip.Route{{Destination: sub, NIC: 1}})
	w.ctx, w.stop = context.WithCancel(context.Background())
	w.wg.Add(2)
	go w.transmit()
	go w.receive()
	return w, nil
}

// NetdevArg is QEMU's -netdev backend for this wire.
func (w *Wire) NetdevArg() string {
	return fmt.Sprintf("socket,udp=%s,localaddr=%s", w.conn.LocalAddr(), w.qemu)
}

// SetGuestMAC sets the destination of crafted frames (the READY line's
// mac=).
func (w *Wire) SetGuestMAC(mac net.HardwareAddr) { w.guestMAC = tcpip.LinkAddress(mac) }

// Dial opens a TCP connection to the guest's port through the stack.
func (w *Wire) Dial(ctx context.Context, port uint16) (net.Conn, error) {
	return gonet.DialContextTCP(ctx, w.Stack, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(w.link.guest.As4()), Port: port}, ipv4.ProtocolNumber)
}

// Close stops the wire.
func (w *Wire) Close() {
	w.stop()
	w.conn.Close()
	w.ch.Close()
	w.wg.Wait()
	w.Stack.Close()
}

func (w *Wire) transmit() {
	defer w.wg.Done()
	for {
		pkt := w.ch.ReadContext(w.ctx)
		if pkt == nil {
			return
		}
		v := pkt.ToView()
		pkt.DecRef()
		w.conn.WriteToUDP(v.AsSlice(), w.qemu)
		v.Release()
	}
}

func (w *Wire) receive() {
	defer w.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, _, err := w.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f := buf[:n]
		if payload, ok, sumOK := benchPayload(f); ok {
			switch c := w.rx.Load(); {
			case c == nil:
				w.stray.Add(1)
			case !sumOK:
				c.badSum.Add(1)
			default:
				c.add(payload)
			}
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), f...))})
		w.ch.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// benchPayload returns the UDP payload of f if f is an IPv4 UDP datagram
// from the guest's app.PPSPort to our benchPort (unfragmented, its
// lengths consistent with f's), else false; sumOK says whether its IPv4
// header checksum and its UDP checksum (when not zero, "none" in IPv4)
// hold, as a real peer would check them: the socket between QEMU and us
// carries frames whole, but the checksums were written by the guest's
// stack or its NIC's offload, which is what is measured.
func benchPayload(f []byte) (payload []byte, ok, sumOK bool) {
	if len(f) < frameHeader || header.Ethernet(f).Type() != header.IPv4ProtocolNumber {
		return nil, false, false
	}
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	if !ip.IsValid(len(ip)) || ip.Protocol() != uint8(header.UDPProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
		return nil, false, false
	}
	u := header.UDP(ip.Payload())
	if len(u) < header.UDPMinimumSize || u.SourcePort() != app.PPSPort || u.DestinationPort() != benchPort ||
		int(u.Length()) < header.UDPMinimumSize || int(u.Length()) > len(u) {
		return nil, false, false
	}
	u = u[:u.Length()]
	p := u[header.UDPMinimumSize:]
	sumOK = ip.IsChecksumValid() &&
		(u.Checksum() == 0 || u.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), checksum.Checksum(p, 0)))
	return p, true, sumOK
}

// craft writes into f (at least frameHeader+size bytes) a frame carrying
// a benchmark datagram of size bytes (size >= app.PPSHeader) from our
// benchPort to the guest's app.PPSPort, with session id and sequence
// seq, and returns the frame. Both checksums are computed, so the guest
// checks them as it would a real peer's.
func (w *Wire) craft(f []byte, size int, id, seq uint64) []byte {
	f = f[:frameHeader+size]
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: peerMAC, DstAddr: w.guestMAC, Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	w.ipID++
	src, dst := tcpip.AddrFrom4(w.link.peer.As4()), tcpip.AddrFrom4(w.link.guest.As4())
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(header.IPv4MinimumSize + header.UDPMinimumSize + size), ID: w.ipID, TTL: 64,
		Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(ip[header.IPv4MinimumSize:])
	p := u[header.UDPMinimumSize:]
	binary.BigEndian.PutUint64(p, id)
	binary.BigEndian.PutUint64(p[8:], seq)
	u.Encode(&header.UDPFields{SrcPort: benchPort, DstPort: app.PPSPort, Length: uint16(header.UDPMinimumSize + size)})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))
	u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(p, xsum)))
	return f
}

// send writes frame f to QEMU.
func (w *Wire) send(f []byte) error {
	_, err := w.conn.WriteToUDP(f, w.qemu)
	return err
}

// seqCounter counts the distinct sequence numbers of one source session
// (id, count): one bit each, so a repeated datagram counts once.
type seqCounter struct {
	id    uint64
	count uint64
	mu    sync.Mutex
	seen  []uint64
	n     int64 // distinct, in range, of the session
	other int64 // another id, out of range, short, or a repeat
	// badSum counts the datagrams whose IPv4 or UDP checksum did not
	// hold (not counted otherwise: a peer would have dropped them).
	badSum atomic.Int64
}

// newSeqCounter returns a counter of count (at most app.PPSMaxCount)
// sequence numbers of session id.
func newSeqCounter(id uint64, count int) *seqCounter {
	count = min(max(count, 0), app.PPSMaxCount)
	return &seqCounter{id: id, count: uint64(count), seen: make([]uint64, (count+63)/64)}
}

// add counts datagram payload p.
func (c *seqCounter) add(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) < app.PPSHeader || binary.BigEndian.Uint64(p) != c.id {
		c.other++
		return
	}
	// Compared with count before indexing: a guest's (or anyone's)
	// sequence cannot index past the bitmap.
	seq := binary.BigEndian.Uint64(p[8:])
	if seq >= c.count || c.seen[seq/64]&(1<<(seq%64)) != 0 {
		c.other++
		return
	}
	c.seen[seq/64] |= 1 << (seq % 64)
	c.n++
}

// counts returns the distinct datagrams counted and the others.
func (c *seqCounter) counts() (n, other int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.other
}
