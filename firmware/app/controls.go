package app

import (
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/netstack"
)

// NICControls implements Controls for an ENET behind a netstack endpoint.
type NICControls struct {
	NIC  *fec.NIC
	EP   *netstack.Endpoint
	Idle func() int64
	// Interrupts, if set, reports interrupts serviced and time spent
	// handling them.
	Interrupts func() (n, ns int64)
}

// SetMode implements Controls. "tso" is scatter-gather placement plus host
// GSO for connections established from now on; "bounce" and "sg" turn GSO
// off for new connections.
func (c *NICControls) SetMode(tx string, cb *int) error {
	switch tx {
	case "bounce":
		c.NIC.SetStrategy(bounce.Bounce)
		c.EP.SetTSO(false)
	case "sg":
		c.NIC.SetStrategy(bounce.SG)
		c.EP.SetTSO(false)
	case "tso":
		c.NIC.SetStrategy(bounce.SG)
		c.EP.SetTSO(true)
	default:
		return fmt.Errorf("unknown tx mode %q (want bounce, sg or tso)", tx)
	}
	if cb != nil {
		c.NIC.SetCopybreak(*cb)
	}
	return nil
}

// Mode implements Controls.
func (c *NICControls) Mode() (string, int) {
	tx := c.NIC.Strategy().String()
	if c.EP.TSO() {
		tx = "tso"
	}
	return tx, c.NIC.Copybreak()
}

// IdleNanoseconds implements Controls.
func (c *NICControls) IdleNanoseconds() int64 { return c.Idle() }

// NICStats is the "nic" member of /stats.
type NICStats struct {
	Link     LinkStats         `json:"link"`
	Driver   fec.Stats         `json:"driver"`
	Endpoint netstack.Stats    `json:"endpoint"`
	MIB      map[string]uint32 `json:"mib"`
	IRQs     int64             `json:"irqs"`
	IRQNs    int64             `json:"irq_ns"`
	// TxFree is the number of free TX descriptors (ring occupancy).
	TxFree int `json:"tx_free"`
}

// LinkStats is the link as the driver runs it: up or down, speed and
// duplex of the last negotiation, and how often it went up and down.
type LinkStats struct {
	Up        bool   `json:"up"`
	SpeedMbps int    `json:"speed_mbps"`
	Duplex    string `json:"duplex"`
	Ups       uint64 `json:"ups"`
	Downs     uint64 `json:"downs"`
}

func linkStats(st fec.Stats) LinkStats {
	d := "half"
	if st.Link.FullDuplex {
		d = "full"
	}
	return LinkStats{Up: st.Link.Up, SpeedMbps: st.Link.Speed, Duplex: d, Ups: st.LinkUps, Downs: st.LinkDowns}
}

// Stats implements Controls.
func (c *NICControls) Stats() any {
	m := map[string]uint32{}
	for _, x := range c.NIC.MIB() {
		m[x.Name] = x.Value
	}
	drv := c.NIC.Stats()
	st := NICStats{Link: linkStats(drv), Driver: drv, Endpoint: c.EP.Stats(), MIB: m, TxFree: c.NIC.TxFree()}
	if c.Interrupts != nil {
		st.IRQs, st.IRQNs = c.Interrupts()
	}
	return st
}

// NewStack builds a gVisor stack on ep with a static IPv4 address and
// prefix, a default route via gw, and an IPv6 link-local address derived
// from mac (EUI-64).
func NewStack(ep stack.LinkEndpoint, mac [6]byte, addr netip.Prefix, gw netip.Addr) (*stack.Stack, error) {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		return nil, fmt.Errorf("app: CreateNIC: %v", err)
	}
	a4 := tcpip.AddrFrom4(addr.Addr().As4())
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: a4, PrefixLen: addr.Bits()}}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("app: IPv4 address: %v", err)
	}
	ll := header.LinkLocalAddr(tcpip.LinkAddress(mac[:]))
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: ll.WithPrefix()}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("app: IPv6 link-local: %v", err)
	}
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()), tcpip.MaskFromBytes(net4Mask(addr.Bits())))
	if err != nil {
		return nil, fmt.Errorf("app: subnet: %v", err)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: sub, NIC: 1},
		{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(gw.As4()), NIC: 1},
		{Destination: header.IPv6EmptySubnet, NIC: 1},
	})
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sb)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rb)
	// Nagle on, as Linux has it by default (gVisor has it off). Without it
	// every small write is a segment, and gVisor's receiver, which charges
	// each segment's memory against a window advertised in payload bytes,
	// drops in-window segments: a peer of ours writing 64 bytes at a time
	// crawls on retransmission timeouts (TestSmallWritesDoNotCrawl,
	// netstack's TestGVisorSmallWritesCrawlWithoutNagle). The services
	// write in large blocks, so they lose nothing to it.
	delay := tcpip.TCPDelayEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &delay); err != nil {
		return nil, fmt.Errorf("app: TCP delay: %v", err)
	}
	return s, nil
}

func net4Mask(bits int) []byte {
	m := make([]byte, 4)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
