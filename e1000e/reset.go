package e1000e

import (
	"fmt"
	"time"
)

// Reset of the 82574L, after Linux drivers/net/ethernet/intel/e1000e
// 82571.c e1000_reset_hw_82571 (the 82571 family's reset, which the
// 82574 uses) and mac.c e1000e_disable_pcie_master /
// e1000e_get_auto_rd_done. Differences from Linux, on purpose:
//   - the MDIO ownership semaphore (EXTCNF_CTRL.MDIO_SW_OWNERSHIP,
//     e1000_get_hw_semaphore_82574) is not taken around the reset: the
//     driver is the only user of the PHY (no manageability firmware
//     shares it on the boards this runs on);
//   - CTRL.RST is polled until it clears before EECD.AUTO_RD is (Linux
//     goes straight to AUTO_RD); reading CTRL is allowed meanwhile.
const (
	ctrlGIOMasterDisable  = 1 << 2  // E1000_CTRL_GIO_MASTER_DISABLE
	statusGIOMasterEnable = 1 << 19 // E1000_STATUS_GIO_MASTER_ENABLE
	eecdAutoRD            = 1 << 9  // E1000_EECD_AUTO_RD

	// masterDisableWait: MASTER_DISABLE_TIMEOUT (800) polls 100 µs apart.
	masterDisableWait = 80 * time.Millisecond
	// quiesceWait: usleep_range(10000, 11000) after RX and TX are stopped.
	quiesceWait = 10 * time.Millisecond
	// autoReadWait: AUTO_READ_DONE_TIMEOUT (10) polls 1 ms apart.
	autoReadWait = 10 * time.Millisecond
	// phyConfigWait: msleep(25) after AUTO_RD for the 82573/82574/82583:
	// "Phy configuration from NVM just starts after EECD_AUTO_RD is set".
	phyConfigWait = 25 * time.Millisecond
)

// resetHW resets the MAC as e1000_reset_hw_82571 does for the 82574:
// GIO master requests disabled and drained ("Prevent the PCI-E bus from
// sticking if there is no TLP connection on the last TLP read/write
// transaction when MAC is reset"; Linux only logs a drain that times out,
// here it is counted in Stats.MasterTimeouts), interrupts masked, RX and
// TX stopped, 10 ms, CTRL.RST, then the NVM auto-read (EECD.AUTO_RD, an
// error if it never completes: no MAC register is touched after that),
// then 25 ms for the PHY configuration the auto-read starts, and pending
// interrupt causes cleared.
func (n *NIC) resetHW() error {
	n.r.Write32(CTRL, n.r.Read32(CTRL)&^ctrlRST|ctrlGIOMasterDisable)
	if !n.wait(masterDisableWait, 100*time.Microsecond, func() bool { return n.r.Read32(STATUS)&statusGIOMasterEnable == 0 }) {
		n.count(func(s *Stats) { s.MasterTimeouts++ })
	}
	n.r.Write32(IMC, 0xFFFFFFFF)
	n.r.Write32(RCTL, 0)
	n.r.Write32(TCTL, tctlPSP)
	_ = n.r.Read32(STATUS) // flush the posted writes
	n.cfg.Delay(quiesceWait)
	n.r.Write32(CTRL, n.r.Read32(CTRL)|ctrlRST)
	n.cfg.Delay(time.Millisecond)
	if !n.wait(20*time.Millisecond, 100*time.Microsecond, func() bool { return n.r.Read32(CTRL)&ctrlRST == 0 }) {
		return fmt.Errorf("e1000e: reset (CTRL %#x): %w", n.r.Read32(CTRL), ErrTimeout)
	}
	if !n.wait(autoReadWait, time.Millisecond, func() bool { return n.r.Read32(EECD)&eecdAutoRD != 0 }) {
		return fmt.Errorf("e1000e: NVM auto-read after reset not done (EECD %#x): %w", n.r.Read32(EECD), ErrTimeout)
	}
	n.cfg.Delay(phyConfigWait)
	n.r.Write32(IMC, 0xFFFFFFFF)
	_ = n.r.Read32(ICR)
	n.count(func(s *Stats) { s.Resets++ })
	return nil
}
