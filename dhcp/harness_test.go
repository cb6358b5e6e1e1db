package dhcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// fastClock runs scale times faster than real time, so that leases of
// minutes and the RFC's 4..64 s back-off pass in milliseconds. Tests wait
// for events, never for durations.
type fastClock struct {
	start time.Time
	scale time.Duration
}

func (c fastClock) Now() time.Time { return c.start.Add(time.Since(c.start) * c.scale) }
func (c fastClock) After(d time.Duration) <-chan time.Time {
	return time.After(d / c.scale)
}

// frame is one Ethernet frame the client sent, decoded by gopacket (an
// independent decoder).
type frame struct {
	ethDst         [6]byte
	ipSrc, ipDst   netip.Addr
	sport, dport   uint16
	dhcp           *layers.DHCPv4
	msgType        layers.DHCPMsgType
	raw            []byte
	udpChecksumErr bool
}

// tap records the frames a stack writes and drops those lose says to.
type tap struct {
	stack.LinkEndpoint
	mu     sync.Mutex
	frames []frame
	lose   func(f frame) bool
	lost   int
}

func (t *tap) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	var keep stack.PacketBufferList
	for _, p := range pkts.AsSlice() {
		v := p.ToView()
		raw := bytes.Clone(v.AsSlice())
		v.Release()
		f := decodeFrame(raw)
		t.mu.Lock()
		t.frames = append(t.frames, f)
		drop := t.lose != nil && t.lose(f)
		if drop {
			t.lost++
		}
		t.mu.Unlock()
		if !drop {
			p.IncRef()
			keep.PushBack(p)
		}
	}
	n := len(pkts.AsSlice())
	if keep.Len() == 0 {
		return n, nil
	}
	_, err := t.LinkEndpoint.WritePackets(keep)
	keep.DecRef()
	return n, err
}

func (t *tap) setLose(f func(frame) bool) {
	t.mu.Lock()
	t.lose = f
	t.mu.Unlock()
}

// dhcpFrames returns the recorded DHCP frames.
func (t *tap) dhcpFrames() []frame {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []frame
	for _, f := range t.frames {
		if f.dhcp != nil {
			out = append(out, f)
		}
	}
	return out
}

func decodeFrame(raw []byte) frame {
	f := frame{raw: raw}
	p := gopacket.NewPacket(raw, layers.LayerTypeEthernet, gopacket.Default)
	if e, ok := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); ok {
		copy(f.ethDst[:], e.DstMAC)
	}
	ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if !ok {
		return f
	}
	f.ipSrc, _ = netip.AddrFromSlice(ip.SrcIP.To4())
	f.ipDst, _ = netip.AddrFromSlice(ip.DstIP.To4())
	u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok {
		return f
	}
	f.sport, f.dport = uint16(u.SrcPort), uint16(u.DstPort)
	// Verify the UDP checksum independently of gVisor.
	ph := make([]byte, 0, 12+len(u.Contents)+len(u.Payload))
	ph = append(ph, ip.SrcIP.To4()...)
	ph = append(ph, ip.DstIP.To4()...)
	ph = append(ph, 0, 17, byte((len(u.Contents)+len(u.Payload))>>8), byte(len(u.Contents)+len(u.Payload)))
	ph = append(ph, u.Contents...)
	ph = append(ph, u.Payload...)
	if u.Checksum != 0 && onesSum(ph) != 0xffff {
		f.udpChecksumErr = true
	}
	if d, ok := p.Layer(layers.LayerTypeDHCPv4).(*layers.DHCPv4); ok {
		f.dhcp = d
		for _, o := range d.Options {
			if o.Type == layers.DHCPOptMessageType && len(o.Data) == 1 {
				f.msgType = layers.DHCPMsgType(o.Data[0])
			}
		}
	}
	return f
}

func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = (s & 0xffff) + s>>16
	}
	return uint16(s)
}

var (
	clientMAC = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
	serverMAC = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02")
	serverIP  = netip.MustParseAddr("10.0.0.2")
	leaseIP   = netip.MustParseAddr("10.0.0.50")
	bcast     = netip.MustParseAddr("255.255.255.255")
)

// probeARP is the ARP configuration of the client's stack: duplicate
// address detection on (two probes 1 ms apart), as the firmware has it.
var probeARP = arp.NewProtocolWithOptions(arp.Options{DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 2, RetransmitTimer: time.Millisecond}})

func newStack(t testing.TB, ep stack.LinkEndpoint, arpProto stack.NetworkProtocolFactory) *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arpProto},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatalf("CreateNIC: %v", err)
	}
	t.Cleanup(func() { s.Close(); s.Wait() })
	return s
}

// reply is what the test server does with one client message.
type reply int

const (
	answer reply = iota // OFFER for DISCOVER, ACK for REQUEST
	ignore
	nak
)

// server is a DHCP server on its own gVisor stack, written for the tests
// from RFC 2131 §4.3 (not sharing the client's codec for what it checks:
// it reads requests with gopacket).
type server struct {
	t     testing.TB
	s     *stack.Stack
	ep    tcpip.Endpoint
	wq    waiter.Queue
	mu    sync.Mutex
	lease uint32 // seconds
	t1    uint32 // 0: not sent, unless sendT
	t2    uint32
	sendT bool // send options 58 and 59 even when 0
	// offerIP, if valid, is offered instead of leaseIP; router, if
	// valid, is sent as option 3 instead of serverIP.
	offerIP, router netip.Addr
	// policy decides per message; nil answers everything.
	policy func(t layers.DHCPMsgType, d *layers.DHCPv4) reply
	// extra, if set, is sent just before every reply (wrong xid,
	// garbage, ...).
	extra func(d *layers.DHCPv4) [][]byte
	seen  []layers.DHCPMsgType
	// closing is set when the test ends: a reply the closed endpoint
	// refuses then is not an error (the race detector's pace made one
	// land there once).
	closing atomic.Bool
}

func newServer(t testing.TB, s *stack.Stack) *server {
	srv := &server{t: t, s: s, lease: 120}
	ep, err := s.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, &srv.wq)
	if err != nil {
		t.Fatalf("server endpoint: %v", err)
	}
	ep.SocketOptions().SetBroadcast(true)
	if err := ep.Bind(tcpip.FullAddress{NIC: 1, Port: ServerPort}); err != nil {
		t.Fatalf("server bind: %v", err)
	}
	srv.ep = ep
	done := make(chan struct{})
	go srv.serve(done)
	t.Cleanup(func() { srv.closing.Store(true); ep.Close(); <-done })
	return srv
}

func (srv *server) set(f func(*server)) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	f(srv)
}

func (srv *server) serve(done chan struct{}) {
	defer close(done)
	we, ch := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	srv.wq.EventRegister(&we)
	defer srv.wq.EventUnregister(&we)
	for {
		var b bytes.Buffer
		_, err := srv.ep.Read(&b, tcpip.ReadOptions{})
		if _, ok := err.(*tcpip.ErrWouldBlock); ok {
			<-ch
			if srv.ep.Readiness(waiter.EventHUp|waiter.EventErr) != 0 {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		srv.handle(b.Bytes())
	}
}

func (srv *server) send(b []byte, to netip.Addr) {
	a := to.As4()
	if _, err := srv.ep.Write(bytes.NewReader(b), tcpip.WriteOptions{To: &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(a), Port: ClientPort}}); err != nil && !srv.closing.Load() {
		srv.t.Errorf("server send to %v: %v", to, err)
	}
}

func (srv *server) handle(b []byte) {
	p := gopacket.NewPacket(b, layers.LayerTypeDHCPv4, gopacket.Default)
	d, ok := p.Layer(layers.LayerTypeDHCPv4).(*layers.DHCPv4)
	if !ok {
		srv.t.Errorf("server: client sent undecodable DHCP: %x", b)
		return
	}
	var mt layers.DHCPMsgType
	for _, o := range d.Options {
		if o.Type == layers.DHCPOptMessageType && len(o.Data) == 1 {
			mt = layers.DHCPMsgType(o.Data[0])
		}
	}
	srv.mu.Lock()
	srv.seen = append(srv.seen, mt)
	act := answer
	if srv.policy != nil {
		act = srv.policy(mt, d)
	}
	extra := srv.extra
	lease, t1, t2 := srv.lease, srv.t1, srv.t2
	srv.mu.Unlock()
	if act == ignore {
		return
	}
	to := bcast
	if ci, _ := netip.AddrFromSlice(d.ClientIP.To4()); ci.IsValid() && !ci.IsUnspecified() {
		to = ci // RFC 2131 §4.1: reply to ciaddr when it is set
	}
	if extra != nil {
		for _, x := range extra(d) {
			srv.send(x, to)
		}
	}
	var out []byte
	switch {
	case mt == layers.DHCPMsgTypeDiscover:
		out = srv.build(d, Offer, lease, t1, t2)
	case mt == layers.DHCPMsgTypeRequest && act == nak:
		out = srv.build(d, Nak, 0, 0, 0)
		to = bcast // §4.3.2: DHCPNAK is broadcast
	case mt == layers.DHCPMsgTypeRequest:
		out = srv.build(d, Ack, lease, t1, t2)
	default:
		return
	}
	srv.send(out, to)
}

// build writes a reply by hand (RFC 2131 figure 1), independently of
// Message.Marshal.
func (srv *server) build(req *layers.DHCPv4, t MessageType, lease, t1, t2 uint32) []byte {
	b := make([]byte, 240, 400)
	b[0], b[1], b[2] = 2, 1, 6
	binary.BigEndian.PutUint32(b[4:], req.Xid)
	binary.BigEndian.PutUint16(b[10:], req.Flags)
	copy(b[12:16], req.ClientIP.To4())
	srv.mu.Lock()
	offer, router, sendT := leaseIP, serverIP, srv.sendT
	if srv.offerIP.IsValid() {
		offer = srv.offerIP
	}
	if srv.router.IsValid() {
		router = srv.router
	}
	srv.mu.Unlock()
	if t != Nak {
		copy(b[16:20], offer.AsSlice())
	}
	copy(b[28:34], req.ClientHWAddr)
	copy(b[236:], []byte{99, 130, 83, 99})
	b = append(b, 53, 1, byte(t), 54, 4)
	b = append(b, serverIP.AsSlice()...)
	if t != Nak {
		b = append(b, 51, 4, byte(lease>>24), byte(lease>>16), byte(lease>>8), byte(lease))
		if t1 != 0 || sendT {
			b = append(b, 58, 4, byte(t1>>24), byte(t1>>16), byte(t1>>8), byte(t1))
		}
		if t2 != 0 || sendT {
			b = append(b, 59, 4, byte(t2>>24), byte(t2>>16), byte(t2>>8), byte(t2))
		}
		b = append(b, 1, 4, 255, 255, 255, 0, 3, 4)
		b = append(b, router.AsSlice()...)
		b = append(b, 6, 8, 10, 0, 0, 3, 10, 0, 0, 4)
	}
	b = append(b, 255)
	for len(b) < 300 {
		b = append(b, 0)
	}
	return b
}

// rig is a client and a server on two stacks joined by a pipe.
type rig struct {
	cs, ss   *stack.Stack
	ctap     *tap
	stap     *tap
	c        *Client
	srv      *server
	clock    fastClock
	cancel   context.CancelFunc
	runErr   chan error
	logMu    sync.Mutex
	logLines []string
}

func newRig(t *testing.T) *rig { t.Helper(); return newRigScale(t, 100) }

// newRigScale is newRig with the client's clock scale times real time.
func newRigScale(t *testing.T, scale time.Duration) *rig {
	t.Helper()
	a, b := pipe.New(clientMAC, serverMAC, 1500)
	r := &rig{ctap: &tap{LinkEndpoint: ethernet.New(a)}, stap: &tap{LinkEndpoint: ethernet.New(b)}}
	r.cs = newStack(t, r.ctap, probeARP)
	r.ss = newStack(t, r.stap, arp.NewProtocol)
	if err := r.ss.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(serverIP.As4()), PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatalf("server address: %v", err)
	}
	r.ss.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	r.srv = newServer(t, r.ss)
	r.clock = fastClock{start: time.Now(), scale: scale}
	c, err := New(Config{Stack: r.cs, NIC: 1, Hostname: "tamanic", Clock: r.clock,
		Rand: rand.New(rand.NewPCG(1, 2)),
		Log: func(f string, a ...any) {
			r.logMu.Lock()
			r.logLines = append(r.logLines, fmt.Sprintf(f, a...))
			r.logMu.Unlock()
		}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.c = c
	return r
}

func (r *rig) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.runErr = cancel, make(chan error, 1)
	go func() { r.runErr <- r.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.runErr; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

func (r *rig) log() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return fmt.Sprint(r.logLines)
}

// waitFor polls cond until it holds; the bound only catches a hung
// client, it is not a performance assertion.
func (r *rig) waitFor(t *testing.T, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(r.c.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("never %s: state %v stats %+v\nlog %s", what, r.c.State(), r.c.Stats(), r.log())
		}
		time.Sleep(time.Millisecond)
	}
}

// addrs returns the client stack's IPv4 addresses on NIC 1.
func (r *rig) addrs() []netip.Prefix {
	var out []netip.Prefix
	for _, a := range r.cs.NICInfo()[1].ProtocolAddresses {
		if a.Protocol == ipv4.ProtocolNumber {
			ip := netip.AddrFrom4(a.AddressWithPrefix.Address.As4())
			out = append(out, netip.PrefixFrom(ip, a.AddressWithPrefix.PrefixLen))
		}
	}
	return out
}
