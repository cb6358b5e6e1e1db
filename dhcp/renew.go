package dhcp

import (
	"context"
	"net/netip"
	"time"
)

// keep runs BOUND, RENEWING and REBINDING; it returns nil when the lease
// is lost (DHCPNAK or expiry) and the client must start over.
func (c *Client) keep(ctx context.Context) error {
	for {
		c.setState(Bound)
		l, _ := c.Lease()
		if l.Duration == Infinite {
			<-ctx.Done()
			return ctx.Err()
		}
		t1, t2, end := l.Start.Add(l.T1), l.Start.Add(l.T2), l.Start.Add(l.Duration)
		if err := c.sleep(ctx, t1.Sub(c.clock.Now())); err != nil {
			return err
		}
		// RENEWING: unicast to the server that granted the lease, then
		// REBINDING: broadcast to any server.
		renewed := false
		for _, phase := range []struct {
			state State
			until time.Time
			to    netip.Addr
		}{{Renewing, t2, l.Server}, {Rebinding, end, netip.AddrFrom4([4]byte{255, 255, 255, 255})}} {
			c.setState(phase.state)
			xid := c.newXID()
			start := c.clock.Now()
			for try := 0; !renewed; try++ {
				left := phase.until.Sub(c.clock.Now())
				if left <= 0 {
					break
				}
				secs := uint16(min(c.clock.Now().Sub(start)/time.Second, 0xffff))
				sent, err := c.send(ctx, c.request(xid, secs, l.Addr.Addr(), netip.Addr{}, netip.Addr{}, false), phase.to, try > 0, func(s *Stats) { s.Requests++ })
				if err != nil {
					return err
				}
				left = phase.until.Sub(c.clock.Now())
				wait := min(max(left/2, MinRenewWait), left)
				server := l.Server
				if phase.state == Rebinding {
					server = netip.Addr{}
				}
				// As in REQUESTING, a refused DHCPACK does not end the
				// §4.4.5 wait.
				var nl *Lease
				m, err := c.await(ctx, wait, c.acceptLease(server, sent, &nl))
				if err != nil {
					return err
				}
				if m == nil {
					continue
				}
				if m.Type() == Nak {
					c.count(func(s *Stats) { s.Naks++ })
					c.drop("DHCPNAK")
					return nil
				}
				if err := c.install(*nl, func(s *Stats) {
					s.Acks++
					if phase.state == Renewing {
						s.Renewals++
					} else {
						s.Rebinds++
					}
				}); err != nil {
					return err
				}
				renewed = true
			}
			if renewed {
				break
			}
		}
		if !renewed {
			c.count(func(s *Stats) { s.Expiries++ })
			c.drop("lease expired")
			return nil
		}
	}
}

// acceptAckNak takes a DHCPACK or DHCPNAK from server (any server if
// server is invalid).
func (c *Client) acceptAckNak(m *Message, server netip.Addr) bool {
	t := m.Type()
	if t != Ack && t != Nak {
		c.count(func(s *Stats) { s.Unexpected++ })
		return false
	}
	if server.IsValid() {
		// RFC 2131 §4.4.1 lets the client ignore replies from servers it did
		// not ask; a missing identifier is tolerated on DHCPNAK only.
		id, ok := m.Addr(OptServerID)
		if (ok && id != server) || (!ok && t == Ack) {
			c.count(func(s *Stats) { s.Unexpected++ })
			return false
		}
	}
	return true
}
