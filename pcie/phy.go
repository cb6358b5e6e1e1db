package pcie

import (
	"fmt"
	"time"
)

// The i.MX6 PCIe PHY's own registers are not memory-mapped: they are
// reached through two port logic registers with a four-phase handshake
// (i.MX 6Dual/6Quad RM, PCIE_PL_PHY_CTRL / PCIE_PL_PHY_STATUS; Linux
// pci-imx6.c pcie_phy_read/pcie_phy_write).
const (
	plPHYStatus = 0x810 // PHY_STAT: data 15:0, ack bit 16
	plPHYCtrl   = 0x814 // PHY_CTRL: data 15:0, cap_addr 16, cap_data 17, write 18, read 19

	phyCtrlCapAddr = 1 << 16
	phyCtrlCapData = 1 << 17
	phyCtrlWrite   = 1 << 18
	phyCtrlRead    = 1 << 19
	phyStatAck     = 1 << 16

	// PHY registers.
	phyATEOvrd       = 0x10   // ATEOVRD: bit 2 override enable, bit 0 reference divider
	phyMPLLOvrdInLo  = 0x11   // MPLL_OVRD_IN_LO: multiplier 8:2, bit 9 override
	phyRxOvrdInLo    = 0x1005 // RX_OVRD_IN_LO: bit 5 RX data enable, bit 3 RX PLL enable
	phyRxOvrdDataPLL = 1<<5 | 1<<3

	phyAckPolls = 10 // of 1 µs each, as Linux
)

// phyAck waits for PHY_STAT's ack to become want.
func (rc *RC) phyAck(want bool) error {
	for i := 0; i < phyAckPolls; i++ {
		if (rc.dbi.Read32(plPHYStatus)&phyStatAck != 0) == want {
			return nil
		}
		rc.delay(time.Microsecond)
	}
	return fmt.Errorf("pcie: %s PHY handshake: ack never became %v: %w", rc.soc.Name, want, ErrPHY)
}

// phyStrobe writes v, then v|strobe, waits for the ack, writes v back and
// waits for the ack to drop.
func (rc *RC) phyStrobe(v, strobe uint32) error {
	rc.dbi.Write32(plPHYCtrl, v|strobe)
	if err := rc.phyAck(true); err != nil {
		return err
	}
	rc.dbi.Write32(plPHYCtrl, v)
	return rc.phyAck(false)
}

func (rc *RC) phyAddr(addr uint16) error {
	rc.dbi.Write32(plPHYCtrl, uint32(addr))
	return rc.phyStrobe(uint32(addr), phyCtrlCapAddr)
}

// phyRead reads a PHY register.
func (rc *RC) phyRead(addr uint16) (uint16, error) {
	if err := rc.phyAddr(addr); err != nil {
		return 0, err
	}
	rc.dbi.Write32(plPHYCtrl, phyCtrlRead)
	if err := rc.phyAck(true); err != nil {
		return 0, err
	}
	v := uint16(rc.dbi.Read32(plPHYStatus))
	rc.dbi.Write32(plPHYCtrl, 0)
	return v, rc.phyAck(false)
}

// phyWrite writes a PHY register.
func (rc *RC) phyWrite(addr, v uint16) error {
	if err := rc.phyAddr(addr); err != nil {
		return err
	}
	rc.dbi.Write32(plPHYCtrl, uint32(v))
	if err := rc.phyStrobe(uint32(v), phyCtrlCapData); err != nil {
		return err
	}
	if err := rc.phyStrobe(uint32(v), phyCtrlWrite); err != nil {
		return err
	}
	rc.dbi.Write32(plPHYCtrl, 0)
	return nil
}

// setupMPLL programs the i.MX6 PHY's MPLL for a reference clock other than
// the 125 MHz its defaults assume (Linux imx6_setup_phy_mpll).
func (rc *RC) setupMPLL() error {
	// New accepts only 0, 100, 125 and 200 MHz.
	var mult, div uint16 = 25, 0
	switch rc.refClock {
	case 100_000_000:
	case 200_000_000:
		div = 1
	default:
		return nil // 125 MHz: the PHY's defaults
	}
	v, err := rc.phyRead(phyMPLLOvrdInLo)
	if err != nil {
		return err
	}
	v = v&^(0x7F<<2) | mult<<2 | 1<<9
	if err := rc.phyWrite(phyMPLLOvrdInLo, v); err != nil {
		return err
	}
	if v, err = rc.phyRead(phyATEOvrd); err != nil {
		return err
	}
	return rc.phyWrite(phyATEOvrd, v&^1|div|1<<2)
}

// resetPHYRx pulses the PHY's RX data and PLL overrides after a failed
// training, which un-sticks a PHY left in Recovery.RcvrLock (Linux
// imx6_pcie_reset_phy, U-Boot). Errors are ignored: the link is down
// either way and the caller reports that.
func (rc *RC) resetPHYRx() {
	v, err := rc.phyRead(phyRxOvrdInLo)
	if err != nil {
		return
	}
	if rc.phyWrite(phyRxOvrdInLo, v|phyRxOvrdDataPLL) != nil {
		return
	}
	rc.delay(2 * time.Millisecond)
	if v, err = rc.phyRead(phyRxOvrdInLo); err == nil {
		_ = rc.phyWrite(phyRxOvrdInLo, v&^phyRxOvrdDataPLL)
	}
}
