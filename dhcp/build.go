package dhcp

import "net/netip"

// base returns a request or discover with the fields every client
// message carries.
func (c *Client) base(t MessageType, xid uint32, secs uint16) *Message {
	m := &Message{Op: OpRequest, XID: xid, Secs: secs, CHAddr: c.mac}
	m.Set(OptMessageType, []byte{byte(t)})
	m.Set(OptClientID, append([]byte{1}, c.mac[:]...))
	m.Set(OptMaxMessageLen, []byte{0x05, 0xdc}) // 1500: what our MTU carries
	if c.cfg.Hostname != "" {
		m.Set(OptHostName, []byte(c.cfg.Hostname))
	}
	m.Set(OptParamRequest, []byte{OptSubnetMask, OptRouter, OptDNS, OptLeaseTime, OptRenewalTime, OptRebindingTime})
	return m
}

// decline builds a DHCPDECLINE of addr to server (RFC 2131 table 5).
func (c *Client) decline(xid uint32, addr, server netip.Addr) *Message {
	m := &Message{Op: OpRequest, XID: xid, CHAddr: c.mac}
	m.Set(OptMessageType, []byte{byte(Decline)})
	m.Set(OptClientID, append([]byte{1}, c.mac[:]...))
	a, sv := addr.As4(), server.As4()
	m.Set(OptRequestedIP, a[:])
	m.Set(OptServerID, sv[:])
	return m
}

func (c *Client) discover(xid uint32, secs uint16) *Message {
	m := c.base(Discover, xid, secs)
	m.Flags = FlagBroadcast
	return m
}

// request builds a DHCPREQUEST: in SELECTING with requested and server
// set (§4.3.2), in RENEWING/REBINDING with ciaddr set and neither.
func (c *Client) request(xid uint32, secs uint16, ciaddr, requested, server netip.Addr, broadcast bool) *Message {
	m := c.base(Request, xid, secs)
	m.CIAddr = ciaddr
	if broadcast {
		m.Flags = FlagBroadcast
	}
	if requested.IsValid() {
		a := requested.As4()
		m.Set(OptRequestedIP, a[:])
	}
	if server.IsValid() {
		a := server.As4()
		m.Set(OptServerID, a[:])
	}
	return m
}
