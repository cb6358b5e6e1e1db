package fec

import (
	"errors"
	"fmt"
	"time"
)

// LinkConfig configures StartLink.
type LinkConfig struct {
	// Addrs are the MDIO addresses probed for the PHY, in order (default
	// 0..31).
	Addrs []int
	// AfterReset applies board-specific PHY settings that the PHY's soft
	// reset restores to their defaults (on the i.MX6UL EVK: the KSZ8081's
	// RMII 50 MHz clock mode). Optional.
	AfterReset func(*PHY) error
	// ResetTimeout bounds the PHY reset (default 500 ms); ANTimeout the
	// first autonegotiation (default 5 s; IEEE 802.3 autonegotiation takes
	// a few hundred milliseconds, more with parallel detection). A link
	// that is not up by then is not an error: PollLink finds it later.
	ResetTimeout, ANTimeout time.Duration
	// Poll is the interval at which PHY waits poll (default 10 ms).
	Poll time.Duration
}

// StartLink takes over the PHY after the board's bring-up: it finds the
// PHY, resets it (whatever mode a boot loader forced), lets the board
// reapply its settings, autonegotiates and programs the MAC for the
// result. It returns the PHY for PollLink and WatchLink.
func (n *NIC) StartLink(c LinkConfig) (*PHY, error) {
	if c.Addrs == nil {
		for a := 0; a < 32; a++ {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if c.ResetTimeout == 0 {
		c.ResetTimeout = 500 * time.Millisecond
	}
	if c.ANTimeout == 0 {
		c.ANTimeout = 5 * time.Second
	}
	p, err := n.FindPHY(c.Addrs...)
	if err != nil {
		return nil, err
	}
	p.Poll = c.Poll
	// Until negotiated the link is unknown (Init assumed 100 Mb/s full
	// duplex); the PHY reset drops it anyway.
	n.ctl.Lock()
	n.link.Up = false
	n.ctl.Unlock()
	if err := p.Reset(c.ResetTimeout); err != nil {
		return nil, err
	}
	if c.AfterReset != nil {
		if err := c.AfterReset(p); err != nil {
			return nil, fmt.Errorf("fec: PHY %d board setup: %w", p.Addr, err)
		}
	}
	l, err := p.Autonegotiate(c.ANTimeout)
	switch {
	case errors.Is(err, ErrTimeout):
		l = Link{} // no partner yet: PollLink brings the link up later
	case err != nil:
		return nil, err
	}
	if err := n.applyLink(l); err != nil {
		return nil, err
	}
	return p, nil
}

// PollLink reads the PHY's status once (one MDIO read while nothing
// changes) and follows a change: on link loss the NIC is marked down (the
// MAC keeps running; frames sent meanwhile are lost on the wire as on a
// disconnected port); on link up the negotiated speed and duplex are read
// and the MAC reprogrammed if they differ from what it runs (a restart:
// frames in flight complete with ErrAborted). BMSR's link status latches
// low, so a flap between two polls is seen as a loss and then a recovery.
// It returns the link and whether it changed.
func (p *PHY) PollLink() (Link, bool, error) {
	n := p.NIC
	n.pollMu.Lock()
	defer n.pollMu.Unlock()
	if n.phyLooped.Load() {
		// The self-test has the PHY in loopback (SelfTest): its link is
		// the loop's, not the wire's. If the test has ended and could not
		// take the PHY out of loopback (an MDIO error), try again.
		if r := n.phyRestore; r.pending {
			if err := n.MDIOWrite(r.addr, MII_BMCR, r.bmcr); err != nil {
				return n.Link(), false, err
			}
			n.phyRestore.pending = false
			n.phyLooped.Store(false)
			err := n.afterPHYLoop(r.bmcr, r.link)
			return n.Link(), true, err
		}
		return n.Link(), false, nil
	}
	bmsr, err := n.MDIORead(p.Addr, MII_BMSR)
	if err != nil {
		return n.Link(), false, err
	}
	cur := n.Link()
	up := bmsr&BMSR_LSTATUS != 0
	switch {
	case !up && cur.Up:
		err := n.applyLink(Link{})
		return n.Link(), true, err
	case up && !cur.Up:
		bmcr, err := n.MDIORead(p.Addr, MII_BMCR)
		if err != nil {
			return cur, false, err
		}
		if bmcr&BMCR_ANENABLE == 0 {
			return cur, false, fmt.Errorf("fec: PHY %d: autonegotiation disabled behind the driver's back (BMCR %#04x)", p.Addr, bmcr)
		}
		gbit := n.cfg.Caps.Has(QuirkGbit) && n.cfg.Interface == RGMII && bmsr&BMSR_ESTATEN != 0
		l, err := p.resolve(gbit)
		if err != nil {
			return cur, false, err
		}
		if !l.Up {
			n.ctl.Lock()
			n.ev.linkUnresolved++
			n.ctl.Unlock()
			return cur, false, fmt.Errorf("fec: PHY %d: link up but no common mode in ANAR/ANLPAR", p.Addr)
		}
		err = n.applyLink(l)
		return n.Link(), true, err
	}
	return cur, false, nil
}

// WatchLink calls PollLink every interval until stop is closed. Errors are
// counted (MDIO timeouts, unresolved links) and polling goes on.
func (p *PHY) WatchLink(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_, _, _ = p.PollLink()
		}
	}
}

// applyLink records l and reprograms the MAC when l is up with a speed or
// duplex the MAC does not run (Linux restarts the MAC on every change;
// keeping it running across a flap to the same mode loses nothing more).
func (n *NIC) applyLink(l Link) error {
	if l.Speed == 1000 && !n.cfg.Caps.Has(QuirkGbit) {
		return fmt.Errorf("fec: %s has no 1000 Mb/s mode", n.cfg.Caps.Name)
	}
	n.ctl.Lock()
	defer n.unlockCtl()
	was := n.link
	switch {
	case !l.Up:
		n.link.Up = false
		if was.Up {
			n.ev.linkDowns++
		}
		return nil
	case was.Speed == l.Speed && was.FullDuplex == l.FullDuplex:
		n.link.Up = true
	default:
		n.link = l
		if err := n.restartLocked(); err != nil {
			return err
		}
	}
	if !was.Up {
		n.ev.linkUps++
	}
	return nil
}
