// Package phylink is the link management every board's ENET shares: take
// over the PHY once (package fec's StartLink: find it, reset it, reapply
// the board's settings, autonegotiate, program the MAC for the result) and
// then poll it for as long as the board runs (as fec's WatchLink, with each
// change on the console), so that the MAC follows every change: a cable pulled and put back, a partner that comes
// back at another speed or duplex. A board differs only in its Config.
//
// It is plain Go on package fec, so it is tested on the host against the
// ENET model and its PHY (phylink_test.go).
package phylink

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tamanic/tamanic/fec"
)

// Poll is the interval of the link poll: one MDIO read of BMSR while
// nothing changes. A flap is seen up to this late.
const Poll = 500 * time.Millisecond

// Config is what differs between boards.
type Config struct {
	// Name prefixes messages, e.g. "mx6ullevk: ENET1".
	Name string
	// Link is passed to fec.NIC.StartLink: the MDIO addresses to probe
	// and the board's PHY settings to reapply after the PHY's reset.
	Link fec.LinkConfig
	// NoReset keeps the PHY's registers as the boot loader left them (for
	// a PHY whose board settings are not known here, which its soft reset
	// would clear): the PHY is only found and autonegotiation restarted.
	NoReset bool
	// Poll overrides the link poll interval (default Poll).
	Poll time.Duration
	// Log receives a line for the PHY found and its link, or for no PHY
	// answering, and one for every link change (nil: none).
	Log io.Writer
}

// Start takes over n's PHY as c says and starts watching its link until
// stop is closed (nil: for as long as the board runs). It returns the PHY,
// or nil with no error when no PHY answers (under QEMU 8.1 and later, say,
// whose EVK ENET1 reaches none): the MAC then stays at the 100 Mb/s full
// duplex fec.NIC.Init assumed and the link is not managed, which Start
// reports on c.Log. Any other PHY failure is an error.
func Start(n *fec.NIC, c Config, stop <-chan struct{}) (*fec.PHY, error) {
	var p *fec.PHY
	var err error
	if c.NoReset {
		p, err = adopt(n, c.Link)
	} else {
		p, err = n.StartLink(c.Link)
	}
	poll := c.Poll
	if poll == 0 {
		poll = Poll
	}
	switch {
	case errors.Is(err, fec.ErrNoPHY):
		if c.Log != nil {
			fmt.Fprintf(c.Log, "%s: %v; link not managed\n", c.Name, err)
		}
		go watch(n, nil, c, poll, stop)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s link: %w", c.Name, err)
	}
	if c.Log != nil {
		fmt.Fprintf(c.Log, "%s: PHY %d, link %v\n", c.Name, p.Addr, n.Link())
	}
	go watch(n, p, c, poll, stop)
	return p, nil
}

// watch is fec.PHY.WatchLink with every change written on c.Log ("link
// down", "link 100 Mb/s full duplex"), as Linux logs them (p nil: no PHY,
// no link to watch). Poll errors are counted by package fec and polling
// goes on.
//
// Each tick also reclaims n's TX ring, which re-kicks the uDMA when
// descriptors wait and TDAR is clear (ERR006358's rule). That is the way
// out for a frame whose kick was skipped (ERR007885: TDAR still set)
// just as the uDMA was finishing: it sends nothing more, so no completion
// interrupt comes to re-kick it, and without this the frame would wait
// for the next Transmit or RX interrupt
// (TestStrandedFrameLeavesOnTheNextTick).
func watch(n *fec.NIC, p *fec.PHY, c Config, poll time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		n.Reclaim()
		if p == nil {
			continue
		}
		if l, changed, _ := p.PollLink(); changed && c.Log != nil {
			fmt.Fprintf(c.Log, "%s: link %v\n", c.Name, l)
		}
	}
}

// adopt finds the PHY and restarts autonegotiation without resetting the
// PHY. A link that does not come up in time is not an error: the watch
// marks the MAC down at its first poll and brings it up when it comes.
func adopt(n *fec.NIC, c fec.LinkConfig) (*fec.PHY, error) {
	addrs := c.Addrs
	if addrs == nil {
		for a := 0; a < 32; a++ {
			addrs = append(addrs, a)
		}
	}
	p, err := n.FindPHY(addrs...)
	if err != nil {
		return nil, err
	}
	p.Poll = c.Poll
	an := c.ANTimeout
	if an == 0 {
		an = 5 * time.Second
	}
	l, err := p.Autonegotiate(an)
	switch {
	case errors.Is(err, fec.ErrTimeout):
		return p, nil
	case err != nil:
		return nil, err
	case l.Up && l != n.Link():
		if err := n.SetLink(l); err != nil {
			return nil, err
		}
	}
	return p, nil
}
