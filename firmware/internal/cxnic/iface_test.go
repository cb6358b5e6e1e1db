package cxnic

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
)

// peer is a gVisor stack on the far end of the ConnectX model's wire: a
// connectxtest.Port whose frames go through a channel endpoint.
type peer struct {
	s   *stack.Stack
	ch  *channel.Endpoint
	mu  sync.Mutex
	out func([]byte)
}

func newPeer(t *testing.T, addr netip.Prefix) *peer {
	p := &peer{ch: channel.New(256, 1514, tcpip.LinkAddress([]byte{2, 0x70, 0x65, 0x65, 0x72, 3}))}
	p.s = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := p.s.CreateNIC(1, ethernet.New(p.ch)); err != nil {
		t.Fatal(err)
	}
	if err := p.s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(addr.Addr().As4()), PrefixLen: addr.Bits()}},
		stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	p.s.SetRouteTable([]tcpip.Route{{Destination: subnetOf(t, addr), NIC: 1}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			pkt := p.ch.ReadContext(t.Context())
			if pkt == nil {
				return
			}
			v := pkt.ToView()
			pkt.DecRef()
			p.mu.Lock()
			out := p.out
			p.mu.Unlock()
			if out != nil {
				out(append([]byte(nil), v.AsSlice()...))
			}
			v.Release()
		}
	}()
	t.Cleanup(func() { p.s.Close(); p.s.Wait(); <-done })
	return p
}

func subnetOf(t *testing.T, p netip.Prefix) tcpip.Subnet {
	m := p.Masked().Addr().As4()
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(m), tcpip.MaskFromBytes(maskBytes(p.Bits())))
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func maskBytes(bits int) []byte {
	b := make([]byte, 4)
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return b
}

// SetPeer implements connectxtest.Port.
func (p *peer) SetPeer(f func([]byte)) {
	p.mu.Lock()
	p.out = f
	p.mu.Unlock()
}

// Deliver implements connectxtest.Port.
func (p *peer) Deliver(frame []byte) bool {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), frame...))})
	p.ch.InjectInbound(0, pkt)
	pkt.DecRef()
	return true
}

// serveDHCP runs a DHCP server on the peer handing out 10.0.3.50/24 with
// the router 10.0.3.2, for an hour.
func (p *peer) serveDHCP(t *testing.T) {
	stacktest.ServeDHCP(t, p.s, 1, netip.MustParsePrefix("10.0.3.50/24"), netip.MustParseAddr("10.0.3.2"))
}

// ctl is the ConnectX's app.Controls in the test (Controls without the
// card's window).
type ctl struct {
	HWTSOMode
}

func (c ctl) Stats() any { return c.EP.Stats() }

// logBuf is a console that outlives the test (the DHCP client may still
// log after it, which a t.Log writer would not allow).
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// connectX brings a ConnectX driver on its model up as NIC 3 of a stack
// whose NIC 1 is static (10.0.0.1/24 via 10.0.0.2), with cfg, the model's
// wire joined to p, through serve as cxnic.Add does.
func connectX(t *testing.T, p *peer, cfg app.NetConfig, con io.Writer) (*app.Network, iface) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 8 << 20})
	mac := [6]byte{2, 0xC7, 0, 0, 0, 3}
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, MAC: mac, NoDone: true})
	connectxtest.Connect(rig.Model, p)
	ep, err := netstack.New(netstack.Options{Device: rig.NIC, TSO: true, GRO: true, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := stacktest.Serve(rig.Model.Activity(), func() { rig.NIC.Poll() })
	t.Cleanup(stop)

	enet := channel.New(16, 1500, "\x02\x00\x00\x00\x00\x01")
	n, err := app.StartNetwork(ethernet.New(enet), [6]byte{2, 0, 0, 0, 0, 1},
		app.NetConfig{Static: netip.MustParsePrefix("10.0.0.1/24"), Gateway: netip.MustParseAddr("10.0.0.2")}, con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stack.Close(); n.Stack.Wait() })
	c := ctl{HWTSOMode{Name: "connectx", EP: ep, Idle: func() int64 { return 0 }}}
	in, err := serve(n, Options{NIC: 3, Net: cfg, Mode: "tso", LeaseWait: time.Minute}, ep, mac, c, time.Now(), con)
	if err != nil {
		t.Fatal(err)
	}
	return n, in
}

// getStats fetches /stats from the ConnectX's services at addr, from the
// peer.
func getStats(t *testing.T, p *peer, addr string) app.NetStatus {
	t.Helper()
	a := netip.MustParseAddr(addr)
	c, err := gonet.DialTCP(p.s, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(a.As4()), Port: app.HTTPPort}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial %s:%d from the peer: %v", addr, app.HTTPPort, err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /stats HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	// net/http's reader: a document past the server's 2 KiB buffer comes
	// chunked.
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("/stats: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/stats: %d %v %q", resp.StatusCode, err, body)
	}
	js := string(body)
	var doc struct {
		IPv4 app.NetStatus `json:"ipv4"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("/stats: %v\n%s", err, js)
	}
	return doc.IPv4
}

// ifaceStatus is NIC nic's entry in NIC 1's ipv4.interfaces.
func ifaceStatus(t *testing.T, n *app.Network, nic int) app.NetStatus {
	t.Helper()
	for _, st := range n.Status().Interfaces {
		if st.NIC == nic {
			return st
		}
	}
	t.Fatalf("no NIC %d in ipv4.interfaces: %+v", nic, n.Status())
	return app.NetStatus{}
}

// TestConnectXDHCP: with the boards' default settings (CXIP empty) the
// ConnectX takes a lease from a DHCP server on its wire (a second gVisor
// stack, across the ConnectX model and driver), the CONNECTX line's
// address is the lease, NIC 1's /stats lists it under ipv4.interfaces,
// the ConnectX's services answer on the leased address, and the default
// route stays with NIC 1.
func TestConnectXDHCP(t *testing.T) {
	cfg, err := app.ParseNetConfig("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	p := newPeer(t, netip.MustParsePrefix("10.0.3.2/24"))
	p.serveDHCP(t)
	var con logBuf
	n, in := connectX(t, p, cfg, &con)
	if in.ip != "10.0.3.50/24" {
		t.Fatalf("CONNECTX ip=%s, want the lease 10.0.3.50/24\nconsole:\n%s", in.ip, con.String())
	}
	st := ifaceStatus(t, n, 3)
	if st.Mode != "dhcp" || st.Address != "10.0.3.50/24" || st.DHCP == nil || st.DHCP.State != "bound" || st.DHCP.Server != "10.0.3.2" {
		t.Errorf("NIC 3 in /stats ipv4.interfaces: %+v dhcp %+v", st, st.DHCP)
	}
	if got := getStats(t, p, "10.0.3.50"); got.NIC != 3 || got.Address != "10.0.3.50/24" || got.DHCP == nil {
		t.Errorf("ConnectX /stats ipv4 %+v", got)
	}
	for _, rt := range n.Stack.GetRouteTable() {
		if rt.Destination.Prefix() == 0 && rt.Destination.ID().BitLen() == 32 && rt.NIC != 1 {
			t.Errorf("default route %v on NIC %d, want NIC 1's only", rt, rt.NIC)
		}
	}
}

// TestConnectXStatic: CXIP with CXDHCP=off (the co-simulation's build)
// still gives the static address, with no client, and the services
// answer on it.
func TestConnectXStatic(t *testing.T) {
	cfg, err := app.ParseNetConfig("10.0.3.1/24", "", "off")
	if err != nil {
		t.Fatal(err)
	}
	p := newPeer(t, netip.MustParsePrefix("10.0.3.2/24"))
	var con logBuf
	n, in := connectX(t, p, cfg, &con)
	if in.ip != "10.0.3.1/24" {
		t.Fatalf("CONNECTX ip=%s, want 10.0.3.1/24", in.ip)
	}
	if st := ifaceStatus(t, n, 3); st.Mode != "static" || st.Address != "10.0.3.1/24" || st.DHCP != nil {
		t.Errorf("NIC 3 in /stats ipv4.interfaces: %+v", st)
	}
	if in.net.DHCP != nil {
		t.Error("a DHCP client runs on a static ConnectX")
	}
	if got := getStats(t, p, "10.0.3.1"); got.NIC != 3 || got.Mode != "static" || got.Address != "10.0.3.1/24" {
		t.Errorf("ConnectX /stats ipv4 %+v", got)
	}
}
