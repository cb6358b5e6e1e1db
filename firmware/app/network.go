package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/dhcp"
)

// Build-time network settings, linked in by make firmware (IP=, GATEWAY=,
// DHCP=) with -ldflags "-X github.com/tamanic/tamanic/firmware/app.BuildIP=...".
// They are only read, by BuildNetConfig.
var (
	// BuildIP is the static address and prefix ("10.0.0.1/24"); empty:
	// none.
	BuildIP string
	// BuildGateway is the static default gateway; empty: none.
	BuildGateway string
	// BuildDHCP is "on", "off" or empty: DHCP exactly when BuildIP is
	// empty. "on" with BuildIP set takes the address by DHCP and falls
	// back to BuildIP when no lease comes within DefaultDHCPWait.
	BuildDHCP string
)

// DefaultDHCPWait is how long StartNetwork waits for a first lease before
// it falls back to the static address or says on the console that it is
// still trying.
const DefaultDHCPWait = 30 * time.Second

// NetConfig is how the firmware gets its IPv4 address.
type NetConfig struct {
	// DHCP takes the address, gateway and DNS servers by DHCP.
	DHCP bool
	// Static is the static address: used as such when DHCP is off, as the
	// fallback when DHCP finds no lease in DHCPWait (invalid: no
	// fallback, DHCP keeps trying).
	Static netip.Prefix
	// Gateway is the static default gateway (invalid: none).
	Gateway netip.Addr
	// DHCPWait defaults to DefaultDHCPWait.
	DHCPWait time.Duration
	// Hostname is sent to the DHCP server (option 12).
	Hostname string
	// Nanotime is the monotonic clock gVisor's stack reads (monoClock);
	// nil: the runtime's. A board's integer clock (board/*.Nanotime)
	// costs a handful of instructions a reading where the runtime's may
	// convert through float64.
	Nanotime func() int64
}

// ParseNetConfig builds a NetConfig from the build-time strings (see
// BuildIP, BuildGateway, BuildDHCP).
func ParseNetConfig(ip, gateway, useDHCP string) (NetConfig, error) {
	c := NetConfig{Hostname: "tamanic"}
	var err error
	if ip != "" {
		if c.Static, err = netip.ParsePrefix(ip); err != nil || !c.Static.Addr().Is4() {
			return c, fmt.Errorf("app: static address %q: want an IPv4 prefix such as 10.0.0.1/24", ip)
		}
	}
	if gateway != "" {
		if c.Gateway, err = netip.ParseAddr(gateway); err != nil || !c.Gateway.Is4() {
			return c, fmt.Errorf("app: gateway %q: want an IPv4 address", gateway)
		}
	}
	switch strings.ToLower(useDHCP) {
	case "":
		c.DHCP = ip == ""
	case "on", "1", "yes", "true":
		c.DHCP = true
	case "off", "0", "no", "false":
		if ip == "" {
			return c, errors.New("app: DHCP off and no static address (make firmware IP=a.b.c.d/n)")
		}
	default:
		return c, fmt.Errorf("app: DHCP=%q: want on or off", useDHCP)
	}
	return c, nil
}

// BuildNetConfig is ParseNetConfig of the build-time settings.
func BuildNetConfig() (NetConfig, error) { return ParseNetConfig(BuildIP, BuildGateway, BuildDHCP) }

// Network is the IPv4 configuration of one interface (NIC) at run time;
// StartNetwork's is NIC 1's, and AddInterface adds the others'
// (interfaces.go).
type Network struct {
	Stack *stack.Stack
	// NIC is the interface's NIC in Stack.
	NIC tcpip.NICID
	// DHCP is the client, nil when the address is static from the start.
	DHCP *dhcp.Client

	routes *routeOwner // shared by every interface of Stack

	mu       sync.Mutex
	mode     string // "dhcp", "static", "static-fallback"
	static   netip.Prefix
	gateway  netip.Addr
	stopDHCP context.CancelFunc
	others   []*Network // interfaces added by AddInterface
}

// NetStatus is the "ipv4" member of /stats.
type NetStatus struct {
	// Mode is "dhcp", "static" or "static-fallback" (DHCP found no lease
	// and the built-in address was taken).
	Mode    string       `json:"mode"`
	NIC     int          `json:"nic"`
	Address string       `json:"address,omitempty"`
	Gateway string       `json:"gateway,omitempty"`
	DHCP    *dhcp.Status `json:"dhcp,omitempty"`
	// Interfaces are the other interfaces' (AddInterface), each with its
	// own lease.
	Interfaces []NetStatus `json:"interfaces,omitempty"`
}

// Status reports the address in use and, under DHCP, the lease.
func (n *Network) Status() NetStatus {
	n.mu.Lock()
	others := append([]*Network(nil), n.others...)
	n.mu.Unlock()
	st := n.status()
	for _, o := range others {
		st.Interfaces = append(st.Interfaces, o.status())
	}
	return st
}

// status is n's own status, without the other interfaces'.
func (n *Network) status() NetStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := NetStatus{Mode: n.mode, NIC: int(n.NIC)}
	if n.DHCP != nil {
		d := n.DHCP.Status()
		st.DHCP = &d
	}
	if n.mode == "dhcp" {
		st.Address, st.Gateway = st.DHCP.Address, st.DHCP.Gateway
		return st
	}
	st.Address = n.static.String()
	if n.gateway.IsValid() {
		st.Gateway = n.gateway.String()
	}
	return st
}

// Addr returns the IPv4 address in use (invalid while DHCP holds no
// lease).
func (n *Network) Addr() netip.Prefix {
	n.mu.Lock()
	mode, static := n.mode, n.static
	n.mu.Unlock()
	if mode != "dhcp" {
		return static
	}
	l, _ := n.DHCP.Lease()
	return l.Addr
}

// StartNetwork builds a gVisor stack on ep (NIC 1, IPv6 link-local from
// mac) and configures IPv4 as cfg says. Under DHCP it returns once the
// first lease is bound; if none comes within cfg.DHCPWait it says so on
// console and either takes cfg.Static (stopping the client) or keeps
// waiting, saying so again every DHCPWait.
func StartNetwork(ep stack.LinkEndpoint, mac [6]byte, cfg NetConfig, console io.Writer) (*Network, error) {
	s, err := newBareStack(ep, mac, cfg.Nanotime)
	if err != nil {
		return nil, err
	}
	n := &Network{Stack: s, NIC: 1, routes: &routeOwner{}, static: cfg.Static, gateway: cfg.Gateway, mode: "static"}
	if !cfg.DHCP {
		if !cfg.Static.IsValid() {
			return nil, errors.New("app: no static address and DHCP off")
		}
		return n, n.setStatic()
	}
	c, stopped, err := n.startDHCP(cfg, console)
	if err != nil {
		return nil, err
	}
	cancel := n.stopDHCP
	wait := cfg.DHCPWait
	if wait <= 0 {
		wait = DefaultDHCPWait
	}
	for waited := wait; ; waited += wait {
		select {
		case <-c.Bound():
			return n, nil
		case <-time.After(wait):
		}
		st := c.Stats()
		if cfg.Static.IsValid() {
			fmt.Fprintf(console, "DHCP: no lease after %v (%d DISCOVERs, %d offers): falling back to the static %v\n",
				waited, st.Discovers, st.Offers, cfg.Static)
			cancel()
			<-stopped
			n.mu.Lock()
			n.mode = "static-fallback"
			n.mu.Unlock()
			return n, n.setStatic()
		}
		fmt.Fprintf(console, "DHCP: no lease after %v (%d DISCOVERs, %d offers), still trying\n", waited, st.Discovers, st.Offers)
	}
}

// arpProbes is ARP with IPv4 duplicate address detection on, which the
// DHCP client uses to probe an ACKed address before taking it (two ARP
// probes from 0.0.0.0, 200 ms apart: shorter than RFC 5227's 3 probes over
// 1-2 s, so that a boot is not held up by a second). Static addresses are
// not probed.
var arpProbes = arp.NewProtocolWithOptions(arp.Options{DADConfigs: stack.DADConfigurations{
	DupAddrDetectTransmits: 2, RetransmitTimer: 200 * time.Millisecond}})

// newBareStack builds a stack with NIC 1 on ep, an IPv6 link-local
// address derived from mac (EUI-64) and no IPv4 address, on the clock
// nanotime (nil: the runtime's).
func newBareStack(ep stack.LinkEndpoint, mac [6]byte, nanotime func() int64) (*stack.Stack, error) {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arpProbes},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
		Clock:              newMonoClock(nanotime),
	})
	if err := s.CreateNIC(1, ep); err != nil {
		return nil, fmt.Errorf("app: CreateNIC: %v", err)
	}
	ll := header.LinkLocalAddr(tcpip.LinkAddress(mac[:]))
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: ll.WithPrefix()}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("app: IPv6 link-local: %v", err)
	}
	s.AddRoute(tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: 1})
	// Every connection's buffers from the memory budget (budget.go), not
	// gVisor's defaults (1 MiB, growing to 4 MiB: 64 never-reading source
	// clients pinned 250 MiB).
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: TCPSendBufferSize, Max: sourceSendBuffer}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: TCPReceiveBufferSize, Max: TCPReceiveBufferSize}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sb); err != nil {
		return nil, fmt.Errorf("app: TCP send buffer: %v", err)
	}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &rb); err != nil {
		return nil, fmt.Errorf("app: TCP receive buffer: %v", err)
	}
	// Nagle on, as Linux has it by default (gVisor has it off). Without it
	// every small write is a segment, and gVisor's receiver, which charges
	// each segment's memory against a window advertised in payload bytes,
	// drops in-window segments: an application of ours writing 64 bytes
	// at a time to a gVisor peer crawls on retransmission timeouts
	// (TestSmallWritesDoNotCrawl, netstack's
	// TestGVisorSmallWritesCrawlWithoutNagle). The services write in large
	// blocks, so they lose nothing to it.
	delay := tcpip.TCPDelayEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &delay); err != nil {
		return nil, fmt.Errorf("app: TCP delay: %v", err)
	}
	// SACK off (gVisor has it on). After a retransmission timeout,
	// gVisor's SACK recovery keeps a lost flight counted in its pipe while
	// fewer than three segments above it were SACKed, and sends a segment
	// or two per timeout: a burst lost at a full RX ring but for its
	// short last segment stalled host soak transfers for minutes
	// (TestTailLossRecoversAtOnce; netstack's
	// TestGVisorTailLossCrawlsWithSACK). Without SACK the timeout resends
	// the flight in slow start.
	sack := tcpip.TCPSACKEnabled(false)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		return nil, fmt.Errorf("app: TCP SACK: %v", err)
	}
	return s, nil
}

// setStatic puts addr on nic with an on-link route to its subnet and, if
// gw is valid, a default route via gw.
func setStatic(s *stack.Stack, nic tcpip.NICID, addr netip.Prefix, gw netip.Addr) error {
	a4 := tcpip.AddrFrom4(addr.Addr().As4())
	if err := s.AddProtocolAddress(nic, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: a4, PrefixLen: addr.Bits()}}, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("app: IPv4 address %v: %v", addr, err)
	}
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()), tcpip.MaskFromBytes(net4Mask(addr.Bits())))
	if err != nil {
		return fmt.Errorf("app: subnet: %v", err)
	}
	s.AddRoute(tcpip.Route{Destination: sub, NIC: nic})
	if gw.IsValid() {
		s.AddRoute(tcpip.Route{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(gw.As4()), NIC: nic})
	}
	return nil
}
