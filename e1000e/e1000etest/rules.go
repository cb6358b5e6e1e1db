package e1000etest

import "time"

// Reset rules, from Linux e1000e 82571.c e1000_reset_hw_82571 for the
// 82573/82574/82583 and the 82574 datasheet (CTRL.GIO Master Disable,
// STATUS.GIO Master Enable, EECD.Auto_RD):
//   - a reset (CTRL.RST) is issued only with GIO master requests
//     disabled: CTRL.GIO_MASTER_DISABLE (bit 2) set, which clears
//     STATUS.GIO_MASTER_ENABLE (bit 19) once no request is pending
//     (e1000e_disable_pcie_master: "Prevent the PCI-E bus from sticking if
//     there is no TLP connection on the last TLP read/write transaction
//     when MAC is reset"); the reset clears the disable again;
//   - after the reset, until the NVM auto-read is done (EECD.AUTO_RD,
//     bit 9, e1000e_get_auto_rd_done), only CTRL, STATUS and EECD may be
//     read ("We don't want to continue accessing MAC registers"), and
//     EXTCNF_CTRL, whose MDIO ownership Linux releases right after the
//     reset (e1000_put_hw_semaphore_82574);
//   - "Phy configuration from NVM just starts after EECD_AUTO_RD is set":
//     for 25 ms after AUTO_RD (msleep(25) for the 82573/82574/82583) the
//     PHY (MDIC) and the NVM (EERD) are not to be used.
const (
	ctrlGIOMasterDisable   = 1 << 2
	statusGIOMasterEnable  = 1 << 19
	eecdPres               = 1 << 8
	eecdAutoRD             = 1 << 9
	defaultAutoReadDelay   = 2 * time.Millisecond
	phyConfigAfterAutoRead = 25 * time.Millisecond
)

func (m *Model) now() int64 {
	if m.opts.Nanotime == nil {
		return 0
	}
	return m.opts.Nanotime()
}

// autoReadDone reports EECD.AUTO_RD: the NVM auto-read after the last
// reset is done.
func (m *Model) autoReadDone() bool {
	if !m.resetting || m.opts.Nanotime == nil && !m.opts.AutoReadNever {
		return true
	}
	if m.opts.AutoReadNever {
		return false
	}
	d := m.opts.AutoReadDelay
	if d == 0 {
		d = defaultAutoReadDelay
	}
	return m.now() >= m.resetAt+int64(d)
}

// checkAccess applies the reset rules (see Options) to an access of off
// other than a read of CTRL, STATUS or EECD.
func (m *Model) checkAccess(what string, off uint32) {
	if !m.resetting {
		return
	}
	if !m.autoReadDone() {
		m.violate("BAR0 %s at %#x after a reset before EECD.AUTO_RD (NVM auto-read not done; Linux e1000_reset_hw_82571 waits in e1000e_get_auto_rd_done)", what, off)
		return
	}
	if m.opts.Nanotime == nil {
		m.resetting = false
		return
	}
	d := m.opts.AutoReadDelay
	if d == 0 {
		d = defaultAutoReadDelay
	}
	if m.now() >= m.resetAt+int64(d+phyConfigAfterAutoRead) {
		m.resetting = false
		return
	}
	if off == rMDIC || off == rEERD {
		m.violate("BAR0 %s at %#x (PHY/NVM) within 25 ms of EECD.AUTO_RD: the PHY configuration from the NVM is still running (Linux e1000_reset_hw_82571: msleep(25) for the 82573/82574/82583)", what, off)
	}
}

// The 82574 bits Linux sets before the transmitter runs
// (82571.c e1000_initialize_hw_bits_82571, from e1000_init_hw_82571, for
// the 82574 and 82583): TXDCTL(0) and TXDCTL(1) bit 22, TARC(0) bits 30:27
// clear and bit 26 set, CTRL bit 29 clear, CTRL_EXT bit 23 clear and bit
// 22 set, GCR bit 22 set, and GCR2 bit 0 set ("workaround for hardware
// errata ... unreliable PCIe completions ... particularly with ASPM
// enabled. Without fix, issue can cause Tx timeouts"). The model cannot
// show what each does in the silicon; it reports a transmitter enabled
// without them. Offsets: Linux regs.h TXDCTL(n) 0x3828 + 0x100n, TARC(n)
// 0x3840 + 0x100n, CTRL_EXT 0x18, GCR 0x5B00, GCR2 0x5B64.
const (
	rCTRLEXT = 0x0018
	rTXDCTL0 = 0x3828
	rTXDCTL1 = 0x3928
	rTARC0   = 0x3840
	rGCR     = 0x5B00
	rGCR2    = 0x5B64
	initBits = "e1000_initialize_hw_bits_82571"
	bit22    = 1 << 22
)

func (m *Model) checkInitBits() {
	type rule struct {
		reg        uint32
		name       string
		set, clear uint32
	}
	for _, r := range []rule{
		{rTXDCTL0, "TXDCTL(0)", bit22, 0},
		{rTXDCTL1, "TXDCTL(1)", bit22, 0},
		{rTARC0, "TARC(0)", 1 << 26, 0xF << 27},
		{rCTRL, "CTRL", 0, 1 << 29},
		{rCTRLEXT, "CTRL_EXT", bit22, 1 << 23},
		{rGCR, "GCR", bit22, 0},
		{rGCR2, "GCR2", 1, 0},
	} {
		v := m.reg[r.reg]
		if v&r.set != r.set || v&r.clear != 0 {
			m.violate("transmitter enabled with %s = %#x: want bits %#x set and %#x clear (Linux %s for the 82574)", r.name, v, r.set, r.clear, initBits)
		}
	}
}

// PHY registers of the PHY-hang check (Linux e1000e phy.h
// E1000_BASE1000T_STATUS 10, idle error count in bits 7:0, and
// E1000_RECEIVE_ERROR_COUNTER 21, saturating at E1000_RECEIVE_ERROR_MAX
// 0xFFFF; 82571.c e1000_check_phy_82574: both at their maximum means the
// PHY is hung).
const (
	phyStatus1000T = 10
	phyRxErrCount  = 21
)

// HangPHY makes the PHY hang as e1000_check_phy_82574 detects it: its
// receive error counter and idle error count stay saturated and it
// passes no frames (received frames are dropped and counted in
// Stats.RxPHYHung) until it is reset (BMCR.Reset through MDIC, or
// CTRL.PHY_RST).
func (m *Model) HangPHY() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.phyHung = true
	m.phy[phyRxErrCount] = 0xFFFF
	m.phy[phyStatus1000T] |= 0xFF
}

// PHYHung reports whether the PHY is still hung.
func (m *Model) PHYHung() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.phyHung
}

func (m *Model) phyReset() {
	m.phyHung = false
	m.phy[phyRxErrCount] = 0
	m.phy[phyStatus1000T] &^= 0xFF
}
