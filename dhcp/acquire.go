package dhcp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// acquire runs INIT, SELECTING and REQUESTING until a lease is bound.
func (c *Client) acquire(ctx context.Context) error {
	for {
		c.setState(Init)
		c.mu.Lock()
		err := c.addUnspecified()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		c.setState(Selecting)
		xid := c.newXID()
		start := c.clock.Now()
		var offer *Message
		for try := 0; offer == nil; try++ {
			secs := uint16(min(c.clock.Now().Sub(start)/time.Second, 0xffff))
			if _, err := c.send(ctx, c.discover(xid, secs), netip.AddrFrom4([4]byte{255, 255, 255, 255}), try > 0, func(s *Stats) { s.Discovers++ }); err != nil {
				return err
			}
			m, err := c.await(ctx, c.backoff(try), func(m *Message) bool { return c.acceptOffer(m) })
			if err != nil {
				return err
			}
			offer = m
		}
		c.count(func(s *Stats) { s.Offers++ })
		server, _ := offer.Addr(OptServerID)
		c.setState(Requesting)
		var lease *Lease
		nak := false
		for try := 0; try < RequestTries && lease == nil && !nak; try++ {
			secs := uint16(min(c.clock.Now().Sub(start)/time.Second, 0xffff))
			sent, err := c.send(ctx, c.request(xid, secs, netip.Addr{}, offer.YIAddr, server, true), netip.AddrFrom4([4]byte{255, 255, 255, 255}), try > 0, func(s *Stats) { s.Requests++ })
			if err != nil {
				return err
			}
			// A DHCPACK the client refuses (leaseFrom counts it) is no
			// answer: the wait goes on to its end, so that a server
			// answering every REQUEST with one cannot cut the backoff.
			m, err := c.await(ctx, c.backoff(try), c.acceptLease(server, sent, &lease))
			if err != nil {
				return err
			}
			if m != nil && m.Type() == Nak {
				nak = true
			}
		}
		if lease == nil {
			// DHCPNAK or no answer: back to INIT after a short random
			// wait, so that a NAKing server is not flooded.
			if nak {
				c.count(func(s *Stats) { s.Naks++ })
			}
			if err := c.sleep(ctx, c.backoff(0)/4); err != nil {
				return err
			}
			continue
		}
		conflict, err := c.probe(ctx, lease.Addr.Addr())
		if err != nil {
			return err
		}
		if conflict {
			// RFC 2131 §4.4.1: DHCPDECLINE, then wait at least 10 s
			// before starting again (§3.1 step 5).
			c.count(func(s *Stats) {
				s.Conflicts++
				s.LastError = fmt.Sprintf("%v is in use on the link (ARP): declined", lease.Addr.Addr())
			})
			if _, err := c.send(ctx, c.decline(xid, lease.Addr.Addr(), server), netip.AddrFrom4([4]byte{255, 255, 255, 255}), false, func(s *Stats) { s.Declines++ }); err != nil {
				return err
			}
			if err := c.sleep(ctx, DeclineWait); err != nil {
				return err
			}
			continue
		}
		return c.install(*lease, func(s *Stats) { s.Acks++; s.Leases++ })
	}
}

func (c *Client) acceptOffer(m *Message) bool {
	if m.Type() != Offer {
		c.count(func(s *Stats) { s.Unexpected++ })
		return false
	}
	if id, ok := m.Addr(OptServerID); !ok || !usable(id) {
		c.count(func(s *Stats) {
			s.BadReply++
			s.LastError = fmt.Sprintf("DHCPOFFER of %v without a usable server identifier", m.YIAddr)
		})
		return false
	}
	if _, why := offered(m); why != "" {
		c.count(func(s *Stats) { s.BadReply++; s.LastError = "DHCPOFFER of " + why })
		return false
	}
	return true
}

// probe asks the link whether addr is in use, by gVisor's IPv4 duplicate
// address detection (ARP probes from 0.0.0.0, RFC 5227). It returns false
// at once when the stack's ARP has DAD off (arp.Options.DADConfigs).
func (c *Client) probe(ctx context.Context, addr netip.Addr) (bool, error) {
	done := make(chan stack.DADResult, 1)
	disp, err := c.cfg.Stack.CheckDuplicateAddress(c.cfg.NIC, ipv4.ProtocolNumber, tcpip.AddrFrom4(addr.As4()),
		func(r stack.DADResult) { done <- r })
	if err != nil {
		c.count(func(s *Stats) { s.LastError = fmt.Sprintf("ARP probe of %v: %v", addr, err) })
		return false, nil
	}
	if disp == stack.DADDisabled {
		return false, nil
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case r := <-done:
		_, dup := r.(*stack.DADDupAddrDetected)
		return dup, nil
	}
}
