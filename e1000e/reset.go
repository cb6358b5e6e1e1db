package e1000e

import (
	"errors"
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
//     goes straight to AUTO_RD); reading CTRL is allowed meanwhile;
//   - with a flash NVM (EECD bits 16:15 = 11, nvm.type
//     e1000_nvm_flash_hw in e1000_init_nvm_params_82571), Linux sets
//     CTRL_EXT.EE_RST 10 µs after CTRL.RST (e1000_reset_hw_82571) and
//     clears EECD.AUPDEN at probe ("Autonomous Flash update bit must be
//     cleared due to Flash update issue", e1000_init_nvm_params_82571);
//     the driver does neither. The boards' 82574L cards and QEMU's model
//     were not checked for a flash NVM, and without the datasheet's
//     EECD reset values no test can tell the two NVM types apart;
//   - a failing MAC reset (CTRL.RST not clearing in 20 ms, the auto-read
//     not done in 10 ms) does not stop Reset: like e1000e_reset, which
//     ignores reset_hw's result, it goes on to configure the adapter,
//     but it returns the error.
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
// error if it never completes; Reset carries on regardless, as Linux),
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

// Registers and bits of the 82574 init bits (Linux regs.h, 82571.c).
const (
	TXDCTL1 = 0x03928 // TXDCTL(1)
	TARC0   = 0x03840 // Transmit Arbitration Count 0
	GCR     = 0x05B00 // PCIe control
	GCR2    = 0x05B64 // PCIe control 2

	initBit22 = 1 << 22
)

// initBits applies Linux 82571.c e1000_initialize_hw_bits_82571 for the
// 82574, called from e1000_init_hw_82571 after the reset: TXDCTL(0) and
// TXDCTL(1) bit 22; TARC(0) bits 30:27 cleared, bit 26 set; CTRL bit 29
// cleared; CTRL_EXT bit 23 cleared, bit 22 set; GCR bit 22 set; GCR2 bit 0
// set ("workaround for hardware errata documented in errata docs Fixes
// issue where some error prone or unreliable PCIe completions are
// occurring, particularly with ASPM enabled. Without fix, issue can cause
// Tx timeouts"). Linux's init differs further, not applied here: the TX
// descriptor write-back policy e1000_init_hw_82571 writes into TXDCTL(0)
// (GRAN, WTHRESH = 1; the driver asks for write-back per descriptor with
// RS), GCR bit 27 (L1 entry without L0s RX, for ASPM, which the root
// port leaves off), flow control (e1000e_setup_link), and the RFCTL IPv6
// extension-header bits, which Linux sets only up to the 82573.
func (n *NIC) initBits() {
	for _, r := range []uint32{TXDCTL, TXDCTL1} {
		n.r.Write32(r, n.r.Read32(r)|initBit22)
	}
	n.r.Write32(TARC0, n.r.Read32(TARC0)&^(0xF<<27)|1<<26)
	n.r.Write32(CTRL, n.r.Read32(CTRL)&^(1<<29|ctrlRST))
	n.r.Write32(CTRL_EXT, n.r.Read32(CTRL_EXT)&^(1<<23)|initBit22)
	n.r.Write32(GCR, n.r.Read32(GCR)|initBit22)
	n.r.Write32(GCR2, n.r.Read32(GCR2)|1)
}

// PHY registers of the hang check (Linux phy.h): 1000BASE-T status, its
// idle error count in bits 7:0, and the receive error counter, which
// saturates at 0xFFFF.
const (
	PHY1000TStatus = 10
	PHYRxErrCount  = 21

	phyIdleErrMax = 0xFF
	phyRxErrMax   = 0xFFFF
	phyCtrlReset  = 1 << 15 // BMCR.Reset (IEEE 802.3 22.2.4.1.1)
)

// WatchdogInterval is how often the owner calls Watchdog: Linux's
// e1000_watchdog_task runs every 2 s.
const WatchdogInterval = 2 * time.Second

// Watchdog is the 82574's periodic check; the owner calls it every
// WatchdogInterval. It looks at the PCIe link the registers are reached
// through (when they are a pcie.Window: an error wrapping ErrLinkDown when
// the link is gone), then at the PHY as Linux does for the 82574
// (FLAG2_CHECK_PHY_HANG; netdev.c e1000e_check_82574_phy_workaround): the
// PHY is hung when its receive error counter reads 0xFFFF and its
// 1000BASE-T idle error count 0xFF (82571.c e1000_check_phy_82574; a
// register that cannot be read counts as not hung), and two checks in a
// row that find it hung reset the adapter (Reset; Linux schedules its
// reset task). It returns the Reset's error, or nil.
func (n *NIC) Watchdog() error {
	if n.closed.Load() {
		return ErrClosed
	}
	if l, ok := n.r.(interface{ LinkUp() bool }); ok && !l.LinkUp() {
		return fmt.Errorf("e1000e: watchdog: %w", ErrLinkDown)
	}
	if !n.phyHung() {
		n.phyHangs.Store(0)
		return nil
	}
	if n.phyHangs.Add(1) < 2 {
		return nil
	}
	n.phyHangs.Store(0)
	n.count(func(s *Stats) { s.PHYHangs++ })
	if err := n.Reset(); err != nil {
		return fmt.Errorf("e1000e: reset after a PHY hang: %w", err)
	}
	return nil
}

// phyHung is e1000_check_phy_82574.
func (n *NIC) phyHung() bool {
	rx, err := n.ReadPHY(PHYRxErrCount)
	if err != nil || rx != phyRxErrMax {
		return false
	}
	st, err := n.ReadPHY(PHY1000TStatus)
	return err == nil && st&phyIdleErrMax == phyIdleErrMax
}

// Reset resets the adapter and brings it back as Init left it, as Linux's
// reset task does (e1000e_reinit_locked): the MAC reset of resetHW (GIO
// master requests drained, then CTRL.RST: after it the controller owns no
// descriptor and moves no data, so the rings are the driver's again),
// the PHY reset (BMCR.Reset, as e1000e_phy_sw_reset in the link set-up),
// then configure. Frames still in the TX ring are completed with
// ErrReset; frames in the RX ring not yet received are dropped (counted in
// Stats.Rx.ResetDropped) and every ring buffer is taken back from the
// device before it is armed again; RX buffers lent to received frames
// stay valid until released.
// A failing step (the NVM auto-read or the PHY reset timing out) does not
// stop it: the adapter is configured and running again either way, and
// the error is returned.
// The statistics registers, which the reset clears, are added to HWStats
// first.
func (n *NIC) Reset() error {
	if n.closed.Load() {
		return ErrClosed
	}
	n.HWStats()
	n.hwMu.Lock()
	defer n.hwMu.Unlock()
	if n.closed.Load() {
		return ErrClosed
	}
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.txMu.Lock()
	n.rxMu.Lock()
	// Whatever the MAC reset returns, the rings are the driver's (RX
	// and TX were stopped and the GIO master drained before CTRL.RST)
	// and the adapter is brought back: Linux's reset task cleans the TX
	// ring in e1000e_down, e1000e_reset ignores reset_hw's result and
	// runs init_hw, and e1000e_up restarts RX and TX. Stopping at the
	// error would strand the frames in the ring and leave RX and TX off
	// with nothing left to notice it.
	err := n.resetHW()
	done := n.tx.abort(n.cfg.Mem)
	if k := n.rx.abort(n.cfg.Mem); k > 0 {
		n.count(func(s *Stats) { s.Rx.ResetDropped += uint64(k) })
	}
	if perr := n.resetPHY(); perr != nil {
		err = errors.Join(err, fmt.Errorf("e1000e: PHY reset: %w", perr))
	}
	n.configure()
	cb := n.cfg.OnTxDone
	n.rxMu.Unlock()
	n.txMu.Unlock()
	for _, d := range done {
		if cb != nil {
			cb(d, ErrReset)
		}
	}
	return err
}

// resetPHY is e1000e_phy_sw_reset: BMCR.Reset, self-clearing.
func (n *NIC) resetPHY() error {
	v, err := n.ReadPHY(PHYControl)
	if err != nil {
		return err
	}
	if err := n.WritePHY(PHYControl, v|phyCtrlReset); err != nil {
		return err
	}
	n.cfg.Delay(time.Microsecond)
	return nil
}
