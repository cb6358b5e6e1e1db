package fectest

import (
	"github.com/tamanic/tamanic/fec"
)

// Clause-22 registers the model's PHY adds to those package fec names
// (IEEE 802.3 22.2.4).
const (
	miiANER        = 6      // autonegotiation expansion
	anerLPANAble   = 1 << 0 // the link partner autonegotiates
	anlparACK      = 1 << 14
	bmsrBase       = 0x7809 // 100BASE-TX/10BASE-T full and half, AN ability, extended capability
	bmsrExtStatus  = 1 << 8 // 1000BASE-T registers present
	bmcrDefault    = fec.BMCR_ANENABLE | fec.BMCR_SPEED100 | fec.BMCR_FULLDPLX
	gbcrDefault    = fec.GBCR_1000FULL | 1<<8
	anarDefault    = 0x01E1
	phyID1, phyID2 = 0x0022, 0x1560 // KSZ8081
	phyGbitID2     = 0x1611         // KSZ9021
)

// phy is a clause-22 PHY negotiating with a configurable link partner
// (IEEE 802.3 clause 28): autonegotiation picks the highest common mode, a
// partner without autonegotiation is found by parallel detection (speed
// sensed, half duplex), and a forced local mode links if the speeds match.
// BMSR.LSTATUS latches low: a link that failed since the last read reads
// down once.
type phy struct {
	o                  *Options
	bmcr, anar, gbcr   uint16
	regs               [32]uint16 // vendor and other registers: stored
	cable              bool       // partner connected and powered
	latchedDown        bool
	anLeft             int // BMSR reads until autonegotiation completes
	res                fec.Link
	partnerFull        bool // the duplex the partner runs
	anlpar, gbsr, aner uint16
}

func (p *phy) init(o *Options) {
	p.o = o
	p.cable = true
	p.reset()
	p.anLeft, p.latchedDown = 0, false // up and negotiated at power-on
}

func (p *phy) reset() {
	p.bmcr, p.anar, p.gbcr = bmcrDefault, anarDefault, 0
	if p.o.PHYGbit {
		p.gbcr = gbcrDefault
	}
	p.restartAN()
}

func (p *phy) restartAN() {
	p.latchedDown = true
	p.anLeft = max(p.o.ANReads, 1)
	p.negotiate()
}

// established reports a link the MAC can use. In loopback the PHY's
// link is to itself, cable or not.
func (p *phy) established() bool {
	if p.looped() {
		return true
	}
	return p.cable && p.res.Up && (p.bmcr&fec.BMCR_ANENABLE == 0 || p.anLeft == 0)
}

// looped reports the PHY's loopback (BMCR bit 14, IEEE 802.3 22.2.4.1.2):
// what the MAC transmits comes back on the receive path, nothing goes onto
// the medium and nothing from it is received.
func (p *phy) looped() bool { return p.bmcr&fec.BMCR_LOOPBACK != 0 }

// loopLink is the mode a looped PHY runs: the speed and duplex BMCR
// selects (22.2.4.1.2: loopback runs at the speed bits 0.13 and 0.6 set;
// autonegotiation plays no part).
func (p *phy) loopLink() fec.Link {
	l := fec.Link{Up: true, Speed: 10, FullDuplex: p.bmcr&fec.BMCR_FULLDPLX != 0}
	switch {
	case p.bmcr&fec.BMCR_SPEED1000 != 0:
		l.Speed = 1000
	case p.bmcr&fec.BMCR_SPEED100 != 0:
		l.Speed = 100
	}
	return l
}

// negotiate resolves the link from both ends' settings.
func (p *phy) negotiate() {
	o := p.o
	p.res, p.anlpar, p.gbsr, p.aner = fec.Link{}, 0, 0, 0
	forced := o.PartnerForced
	if p.bmcr&fec.BMCR_ANENABLE != 0 {
		if forced == nil {
			p.aner = anerLPANAble
			p.anlpar = o.PartnerAdv | anlparACK
			if o.PartnerGbit && o.PHYGbit {
				p.gbsr = fec.GBSR_LP1000FD
			}
			c := p.anar & o.PartnerAdv
			switch {
			case o.PHYGbit && o.PartnerGbit && p.gbcr&fec.GBCR_1000FULL != 0:
				p.res = fec.Link{Up: true, Speed: 1000, FullDuplex: true}
			case c&fec.ADV_100FULL != 0:
				p.res = fec.Link{Up: true, Speed: 100, FullDuplex: true}
			case c&fec.ADV_100HALF != 0:
				p.res = fec.Link{Up: true, Speed: 100}
			case c&fec.ADV_10FULL != 0:
				p.res = fec.Link{Up: true, Speed: 10, FullDuplex: true}
			case c&fec.ADV_10HALF != 0:
				p.res = fec.Link{Up: true, Speed: 10}
			}
			p.partnerFull = p.res.FullDuplex
			return
		}
		// Parallel detection: only the speed can be sensed (not 1000BASE-T,
		// which needs autonegotiation); duplex is assumed half. What
		// ANLPAR shows then differs between PHYs (UNCONFIRMED); this one
		// sets the detected technology's bit.
		bit := map[int]uint16{10: fec.ADV_10HALF, 100: fec.ADV_100HALF}[forced.Speed]
		if bit != 0 && p.anar&bit != 0 {
			p.res = fec.Link{Up: true, Speed: forced.Speed}
			p.anlpar = bit
		}
		p.partnerFull = forced.FullDuplex
		return
	}
	// Forced locally (BMCR speed and duplex bits).
	speed := 10
	switch {
	case p.bmcr&fec.BMCR_SPEED100 != 0:
		speed = 100
	case p.bmcr&fec.BMCR_SPEED1000 != 0:
		return // 1000BASE-T cannot be forced without autonegotiation
	}
	full := p.bmcr&fec.BMCR_FULLDPLX != 0
	if forced != nil {
		if forced.Speed == speed {
			p.res, p.partnerFull = fec.Link{Up: true, Speed: speed, FullDuplex: full}, forced.FullDuplex
		}
		return
	}
	// The partner autonegotiates and finds us by parallel detection: it
	// runs half duplex whatever we forced.
	bit := map[int]uint16{10: fec.ADV_10HALF | fec.ADV_10FULL, 100: fec.ADV_100HALF | fec.ADV_100FULL}[speed]
	if o.PartnerAdv&bit != 0 {
		p.res, p.partnerFull = fec.Link{Up: true, Speed: speed, FullDuplex: full}, false
	}
}

func (p *phy) read(ra int) uint16 {
	switch ra {
	case fec.MII_BMCR:
		return p.bmcr
	case fec.MII_BMSR:
		if p.cable && p.bmcr&fec.BMCR_ANENABLE != 0 && p.anLeft > 0 {
			p.anLeft--
		}
		v := uint16(bmsrBase)
		if p.o.PHYGbit {
			v |= bmsrExtStatus
		}
		if p.cable && p.bmcr&fec.BMCR_ANENABLE != 0 && p.anLeft == 0 && p.res.Up {
			v |= fec.BMSR_ANEGDONE
		}
		if p.established() && !p.latchedDown {
			v |= fec.BMSR_LSTATUS
		}
		p.latchedDown = false
		return v
	case fec.MII_PHYID1:
		return phyID1
	case fec.MII_PHYID2:
		if p.o.PHYGbit {
			return phyGbitID2
		}
		return phyID2
	case fec.MII_ANAR:
		return p.anar
	case fec.MII_ANLPAR:
		if p.anLeft > 0 || !p.cable {
			return 0
		}
		return p.anlpar
	case miiANER:
		return p.aner
	case fec.MII_GBCR:
		return p.gbcr
	case fec.MII_GBSR:
		if p.anLeft > 0 || !p.cable {
			return 0
		}
		return p.gbsr
	}
	return p.regs[ra]
}

func (p *phy) write(ra int, v uint16) {
	switch ra {
	case fec.MII_BMCR:
		if v&fec.BMCR_RESET != 0 {
			p.reset()
			return
		}
		old := p.bmcr
		p.bmcr = v &^ fec.BMCR_ANRESTART // self-clearing
		if (old^v)&fec.BMCR_LOOPBACK != 0 {
			// Into or out of loopback: the link the MAC saw is gone.
			p.latchedDown = true
		}
		switch {
		case v&fec.BMCR_ANENABLE != 0 && (v&fec.BMCR_ANRESTART != 0 || old&fec.BMCR_ANENABLE == 0):
			p.restartAN()
		case v&fec.BMCR_ANENABLE == 0 && (old&fec.BMCR_ANENABLE != 0 || (old^v)&(fec.BMCR_SPEED100|fec.BMCR_SPEED1000|fec.BMCR_FULLDPLX) != 0):
			p.latchedDown = true
			p.anLeft = 0
			p.negotiate()
		}
	case fec.MII_ANAR:
		p.anar = v
	case fec.MII_GBCR:
		if p.o.PHYGbit {
			p.gbcr = v
		}
	case fec.MII_BMSR, fec.MII_PHYID1, fec.MII_PHYID2, fec.MII_ANLPAR, miiANER, fec.MII_GBSR:
		// read only
	default:
		p.regs[ra] = v
	}
}

// SetLink connects (up) or disconnects the link partner. On reconnection
// the PHY autonegotiates again.
func (m *Model) SetLink(up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &m.phy
	if up == p.cable {
		return
	}
	p.cable = up
	if !up {
		p.latchedDown = true
		return
	}
	if p.bmcr&fec.BMCR_ANENABLE != 0 {
		p.restartAN()
	} else {
		p.negotiate()
	}
}

// SetPartner changes the link partner (adv and gbit as Options.PartnerAdv
// and PartnerGbit; forced as Options.PartnerForced). Call it with the link
// down: it takes effect at the next SetLink(true).
func (m *Model) SetPartner(adv uint16, gbit bool, forced *fec.Link) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.PartnerAdv, m.opts.PartnerGbit, m.opts.PartnerForced = adv|1, gbit, forced
}

// PHYLink returns the link the PHY has established (Up false when none).
func (m *Model) PHYLink() fec.Link {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.phy.established() {
		return fec.Link{}
	}
	return m.phy.res
}

// macLink returns the speed and duplex the MAC is programmed for (ECR.SPEED,
// RCR.RMII_10T, TCR.FDEN; 22.5.5, 22.5.10, 22.5.11).
func (m *Model) macLink() fec.Link {
	l := fec.Link{Up: true, Speed: 100, FullDuplex: m.get(fec.ENETx_TCR)&fec.TCR_FDEN != 0}
	switch {
	case m.get(fec.ENETx_ECR)&fec.ECR_SPEED != 0:
		l.Speed = 1000
	case m.get(fec.ENETx_RCR)&fec.RCR_RMII_10T != 0:
		l.Speed = 10
	}
	return l
}

// wireOK reports whether a frame crosses the PHY: the link is established
// and the MAC runs at the PHY's speed and duplex. Frames that do not are
// lost as on silicon and counted (NoLink, LinkMismatch); a duplex the
// partner does not share is counted as DuplexMismatch (on silicon: late
// collisions and CRC errors under load).
func (m *Model) wireOK() bool {
	p := &m.phy
	if !p.established() {
		m.stats.NoLink++
		return false
	}
	if m.macLink() != p.res {
		m.stats.LinkMismatch++
		return false
	}
	if p.partnerFull != p.res.FullDuplex {
		m.stats.DuplexMismatch++
	}
	return true
}

// SetLink connects or disconnects both ends of the wire.
func (w *Wire) SetLink(up bool) {
	w.ends[0].SetLink(up)
	w.ends[1].SetLink(up)
}
