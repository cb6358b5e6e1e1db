package dhcp

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

var unspecified = tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
	AddressWithPrefix: tcpip.AddressWithPrefix{Address: header.IPv4Any, PrefixLen: 32}}

// addUnspecified puts 0.0.0.0 on the NIC so that broadcasts leave with
// it as their source (RFC 2131 §4.1). c.mu is held.
func (c *Client) addUnspecified() error {
	if c.unspec {
		return nil
	}
	if err := c.cfg.Stack.AddProtocolAddress(c.cfg.NIC, unspecified, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("dhcp: adding 0.0.0.0 to NIC %d: %v", c.cfg.NIC, err)
	}
	c.unspec = true
	return nil
}

// dropUnspecified removes 0.0.0.0 from the NIC. c.mu is held.
func (c *Client) dropUnspecified() {
	if c.unspec {
		c.cfg.Stack.RemoveAddress(c.cfg.NIC, header.IPv4Any)
		c.unspec = false
	}
}

func isIPv4Route(nic tcpip.NICID) func(tcpip.Route) bool {
	return func(r tcpip.Route) bool { return r.NIC == nic && r.Destination.ID().BitLen() == 32 }
}

// install puts l's address and routes on the NIC, replacing any earlier
// lease's, counts the ACK with counter and enters BOUND; Bound() is closed
// only then, so that whoever waits on it sees the lease, the counters and
// the state together.
func (c *Client) install(l Lease, counter func(*Stats)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, nic := c.cfg.Stack, c.cfg.NIC
	if c.have && c.lease.Addr != l.Addr {
		s.RemoveAddress(nic, tcpip.AddrFrom4(c.lease.Addr.Addr().As4()))
	}
	if !c.have || c.lease.Addr != l.Addr {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(l.Addr.Addr().As4()), PrefixLen: l.Addr.Bits()}}
		if err := s.AddProtocolAddress(nic, pa, stack.AddressProperties{}); err != nil {
			c.have = false
			return fmt.Errorf("dhcp: adding %v to NIC %d: %v", l.Addr, nic, err)
		}
	}
	c.dropUnspecified()
	s.RemoveRoutes(isIPv4Route(nic))
	m := l.Addr.Masked()
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(m.Addr().As4()), tcpip.MaskFromBytes(maskBytes(m.Bits())))
	if err != nil {
		return fmt.Errorf("dhcp: subnet %v: %v", m, err)
	}
	s.AddRoute(tcpip.Route{Destination: sub, NIC: nic})
	if l.Gateway.IsValid() && (c.cfg.DefaultRoute == nil || c.cfg.DefaultRoute(nic, l.Gateway)) {
		s.AddRoute(tcpip.Route{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(l.Gateway.As4()), NIC: nic})
	}
	c.lease, c.have = l, true
	counter(&c.stats)
	c.setState(Bound)
	c.once.Do(func() { close(c.bound) })
	if c.cfg.Log != nil {
		c.cfg.Log("dhcp: bound %v gateway %v dns %v server %v lease %v", l.Addr, l.Gateway, l.DNS, l.Server, l.Duration)
	}
	return nil
}

// drop removes the lease's address and routes.
func (c *Client) drop(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have {
		return
	}
	c.cfg.Stack.RemoveAddress(c.cfg.NIC, tcpip.AddrFrom4(c.lease.Addr.Addr().As4()))
	c.cfg.Stack.RemoveRoutes(isIPv4Route(c.cfg.NIC))
	if c.cfg.Log != nil {
		c.cfg.Log("dhcp: dropped %v: %s", c.lease.Addr, why)
	}
	c.have = false
	c.lease = Lease{}
}
