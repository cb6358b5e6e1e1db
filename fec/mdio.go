package fec

import (
	"fmt"
	"time"
)

// MDIORead reads clause-22 register ra of the PHY at address pa (22.6.4.3
// "MII management frame structure", IMX6ULLRM).
func (n *NIC) MDIORead(pa, ra int) (uint16, error) {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	v, err := n.mdio(MMFR_ST_C22|MMFR_OP_RD|MMFR_TA|uint32(pa&0x1F)<<MMFR_PA|uint32(ra&0x1F)<<MMFR_RA, pa, ra)
	return uint16(v), err
}

// MDIOWrite writes v into clause-22 register ra of the PHY at pa.
func (n *NIC) MDIOWrite(pa, ra int, v uint16) error {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	_, err := n.mdio(MMFR_ST_C22|MMFR_OP_WR|MMFR_TA|uint32(pa&0x1F)<<MMFR_PA|uint32(ra&0x1F)<<MMFR_RA|uint32(v), pa, ra)
	return err
}

func (n *NIC) mdio(frame uint32, pa, ra int) (uint32, error) {
	r := n.regs
	r.Write32(ENETx_EIR, EIR_MII)
	r.Write32(ENETx_MMFR, frame)
	deadline := time.Now().Add(n.cfg.MDIOTimeout)
	for r.Read32(ENETx_EIR)&EIR_MII == 0 {
		if time.Now().After(deadline) {
			n.ev.mdioTimeouts++
			return 0, fmt.Errorf("fec: MDIO PHY %d reg %d: no completion in %v: %w", pa, ra, n.cfg.MDIOTimeout, ErrTimeout)
		}
	}
	v := r.Read32(ENETx_MMFR) & MMFR_DATA
	r.Write32(ENETx_EIR, EIR_MII)
	return v, nil
}

// Clause-22 PHY registers and bits (IEEE 802.3 22.2.4).
const (
	MII_BMCR   = 0
	MII_BMSR   = 1
	MII_PHYID1 = 2
	MII_PHYID2 = 3
	MII_ANAR   = 4
	MII_ANLPAR = 5
	MII_ANER   = 6  // autonegotiation expansion
	MII_GBCR   = 9  // 1000BASE-T control
	MII_GBSR   = 10 // 1000BASE-T status

	BMCR_RESET     = 1 << 15
	BMCR_LOOPBACK  = 1 << 14 // IEEE 802.3 22.2.4.1.2
	BMCR_SPEED100  = 1 << 13
	BMCR_ANENABLE  = 1 << 12
	BMCR_ANRESTART = 1 << 9
	BMCR_FULLDPLX  = 1 << 8
	BMCR_SPEED1000 = 1 << 6
	BMSR_ESTATEN   = 1 << 8 // 1000BASE-T registers (9, 10) present
	BMSR_ANEGDONE  = 1 << 5
	ANER_LPANABLE  = 1 << 0 // the partner autonegotiates (else: parallel detection)
	BMSR_LSTATUS   = 1 << 2
	ADV_100FULL    = 1 << 8
	ADV_100HALF    = 1 << 7
	ADV_10FULL     = 1 << 6
	ADV_10HALF     = 1 << 5
	GBCR_1000FULL  = 1 << 9
	GBSR_LP1000FD  = 1 << 11
)

// Link is a resolved link state.
type Link struct {
	Up         bool
	Speed      int // 10, 100 or 1000 Mb/s
	FullDuplex bool
}

func (l Link) String() string {
	if !l.Up {
		return "down"
	}
	d := "half"
	if l.FullDuplex {
		d = "full"
	}
	return fmt.Sprintf("%d Mb/s %s duplex", l.Speed, d)
}

// ResolveLink picks the highest mode both ends advertise (IEEE 802.3 Annex
// 28B.3 priority): 1000 full, 100 full, 100 half, 10 full, 10 half.
func ResolveLink(bmsr, anar, anlpar, gbcr, gbsr uint16, gbit bool) Link {
	l := Link{Up: bmsr&BMSR_LSTATUS != 0}
	common := anar & anlpar
	switch {
	case gbit && gbcr&GBCR_1000FULL != 0 && gbsr&GBSR_LP1000FD != 0:
		l.Speed, l.FullDuplex = 1000, true
	case common&ADV_100FULL != 0:
		l.Speed, l.FullDuplex = 100, true
	case common&ADV_100HALF != 0:
		l.Speed = 100
	case common&ADV_10FULL != 0:
		l.Speed, l.FullDuplex = 10, true
	case common&ADV_10HALF != 0:
		l.Speed = 10
	default:
		l.Up = false
	}
	return l
}

// PHY is a clause-22 PHY on the NIC's MDIO bus.
type PHY struct {
	NIC  *NIC
	Addr int
	// Poll is the autonegotiation poll interval (default 10 ms).
	Poll time.Duration
}

// FindPHY returns the first address in addrs whose PHY ID registers answer
// (not all ones or all zeros), and records it as the NIC's PHY (PHYAddr).
func (n *NIC) FindPHY(addrs ...int) (*PHY, error) {
	for _, a := range addrs {
		id1, err := n.MDIORead(a, MII_PHYID1)
		if err != nil {
			return nil, err
		}
		if id1 != 0xFFFF && id1 != 0 {
			// The PHY the driver works with from now on (StartLink and
			// a board adopting a PHY both find it here): the register
			// dump reads this one (PHYAddr).
			n.phyAddr.Store(int32(a))
			n.phyTaken.Store(true)
			return &PHY{NIC: n, Addr: a}, nil
		}
	}
	return nil, fmt.Errorf("%w at addresses %v", ErrNoPHY, addrs)
}

// ID returns the 32-bit PHY identifier.
func (p *PHY) ID() (uint32, error) {
	h, err := p.NIC.MDIORead(p.Addr, MII_PHYID1)
	if err != nil {
		return 0, err
	}
	l, err := p.NIC.MDIORead(p.Addr, MII_PHYID2)
	return uint32(h)<<16 | uint32(l), err
}

// Reset resets the PHY and waits (up to timeout) for BMCR.RESET to clear.
func (p *PHY) Reset(timeout time.Duration) error {
	if err := p.NIC.MDIOWrite(p.Addr, MII_BMCR, BMCR_RESET); err != nil {
		return err
	}
	return p.wait(timeout, "reset", func() (bool, error) {
		v, err := p.NIC.MDIORead(p.Addr, MII_BMCR)
		return v&BMCR_RESET == 0, err
	})
}

// Autonegotiate advertises every mode the MAC supports, restarts
// autonegotiation, waits up to timeout for it to complete and returns the
// resolved link. A gigabit-capable PHY (BMSR.ESTATEN) on a MAC or interface
// without gigabit gets its 1000BASE-T advertisement cleared. A partner
// that does not autonegotiate (ANER.LP_AN_ABLE clear) was found by parallel
// detection: the link is half duplex (IEEE 802.3 28.2.3.1).
func (p *PHY) Autonegotiate(timeout time.Duration) (Link, error) {
	n := p.NIC
	gbit := n.cfg.Caps.Has(QuirkGbit) && n.cfg.Interface == RGMII
	if err := n.MDIOWrite(p.Addr, MII_ANAR, ADV_100FULL|ADV_100HALF|ADV_10FULL|ADV_10HALF|1); err != nil {
		return Link{}, err
	}
	bmsr, err := n.MDIORead(p.Addr, MII_BMSR)
	if err != nil {
		return Link{}, err
	}
	hasGbit := bmsr&BMSR_ESTATEN != 0
	if hasGbit {
		var gbcr uint16
		if gbit {
			gbcr = GBCR_1000FULL
		}
		if err := n.MDIOWrite(p.Addr, MII_GBCR, gbcr); err != nil {
			return Link{}, err
		}
	}
	if err := n.MDIOWrite(p.Addr, MII_BMCR, BMCR_ANENABLE|BMCR_ANRESTART); err != nil {
		return Link{}, err
	}
	err = p.wait(timeout, "autonegotiation", func() (bool, error) {
		v, err := n.MDIORead(p.Addr, MII_BMSR)
		return v&BMSR_ANEGDONE != 0, err
	})
	if err != nil {
		return Link{}, err
	}
	return p.resolve(gbit && hasGbit)
}

// resolve reads the negotiated abilities and resolves the link.
func (p *PHY) resolve(gbit bool) (Link, error) {
	n := p.NIC
	regs := map[int]uint16{}
	read := []int{MII_BMSR, MII_BMSR, MII_ANAR, MII_ANLPAR, MII_ANER} // BMSR twice: link status latches low
	if gbit {
		read = append(read, MII_GBCR, MII_GBSR)
	}
	for _, r := range read {
		v, err := n.MDIORead(p.Addr, r)
		if err != nil {
			return Link{}, err
		}
		regs[r] = v
	}
	l := ResolveLink(regs[MII_BMSR], regs[MII_ANAR], regs[MII_ANLPAR], regs[MII_GBCR], regs[MII_GBSR], gbit)
	if regs[MII_ANER]&ANER_LPANABLE == 0 {
		l.FullDuplex = false
	}
	return l, nil
}

func (p *PHY) wait(timeout time.Duration, what string, done func() (bool, error)) error {
	poll := p.Poll
	if poll == 0 {
		poll = 10 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fec: PHY %d %s not complete after %v: %w", p.Addr, what, timeout, ErrTimeout)
		}
		time.Sleep(poll)
	}
}
