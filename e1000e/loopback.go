package e1000e

import "fmt"

// MAC loopback of the 82574L, for the self-test (SelfTest).
//
// The 82574 datasheet lists "MAC loopback" among the controller's MAC
// features (Product Features); RCTL.LBM (bits 7:6) selects it with 01b
// (Linux defines.h E1000_RCTL_LBM_MAC). The MAC is forced to 1000 Mb/s
// full duplex with its link up, as Linux does for the one e1000e part it
// puts in MAC loopback (ethtool.c e1000_set_es2lan_mac_loopback: CTRL
// SLU, FRCSPD, FRCDPX, SPD_1000, FD, then RCTL.LBM_MAC) and as Intel's
// own diagnostics do for the i350/i354 MAC loopback.
//
// Differences from Linux, on purpose: for a copper 82574 Linux's
// `ethtool -t` uses the PHY's loopback instead (ethtool.c
// e1000_setup_loopback_test → e1000_integrated_phy_loopback, BM PHY:
// MAC interface speed in PHY page 2 register 21, a PHY reset, BMCR
// 0x4140, 250 ms, then the same CTRL forcing), as Intel's UEFI
// diagnostics do ("Boazman" PHY loopback, with CTRL.ILOS for the 82574).
// The MAC loopback leaves the PHY, its autonegotiation and the link
// partner alone and needs no 250 ms wait; it does not test the
// MAC-to-PHY interface. Whether the silicon loops with exactly these
// CTRL bits was not checked on a card (none here); QEMU 7.2's e1000e
// loops on either (hw/net/e1000e_core.c e1000e_tx_pkt_send: RCTL.LBM ==
// LBM_MAC or BMCR loopback → net_tx_pkt_send_loopback).

// loopCtrlBits are the CTRL bits the loopback sets and restores.
const loopCtrlBits = ctrlSLU | ctrlFD | ctrlFRCSPD | ctrlFRCDPX | ctrlSpeedMask

// SetLoopback puts the MAC in its internal loopback (RCTL.LBM = 01b, CTRL
// forced to 1000 Mb/s full duplex, link up) or takes it out, restoring
// the CTRL bits it changed and RCTL.LBM = 00b. A Reset meanwhile keeps
// the loopback. In loopback nothing is sent on the wire.
func (n *NIC) SetLoopback(on bool) error {
	if n.closed.Load() {
		return fmt.Errorf("e1000e: loopback: %w", ErrClosed)
	}
	n.hwMu.Lock() // not in the middle of a Reset
	defer n.hwMu.Unlock()
	n.filtMu.Lock()
	defer n.filtMu.Unlock()
	switch {
	case on && !n.loop:
		n.loopCtrl = n.r.Read32(CTRL) & loopCtrlBits
		n.loop = true
		n.loopOnLocked()
	case !on && n.loop:
		n.loop = false
		n.r.Write32(RCTL, n.r.Read32(RCTL)&^rctlLBMMask)
		n.r.Write32(CTRL, n.r.Read32(CTRL)&^(loopCtrlBits|ctrlRST|ctrlPHYRST)|n.loopCtrl)
	}
	_ = n.r.Read32(STATUS) // flush the posted writes
	return nil
}

// Loopback reports whether the MAC is in loopback.
func (n *NIC) Loopback() bool {
	n.filtMu.Lock()
	defer n.filtMu.Unlock()
	return n.loop
}

// loopOnLocked writes the loopback's CTRL and RCTL bits (filtMu held).
func (n *NIC) loopOnLocked() {
	c := n.r.Read32(CTRL) &^ (ctrlSpeedMask | ctrlRST | ctrlPHYRST)
	n.r.Write32(CTRL, c|ctrlSLU|ctrlFD|ctrlFRCSPD|ctrlFRCDPX|ctrlSpeed1000)
	n.r.Write32(RCTL, n.r.Read32(RCTL)&^rctlLBMMask|rctlLBMMAC)
}
