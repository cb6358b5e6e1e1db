package e1000etest

import "github.com/tamanic/tamanic/dma"

// Loopback, as the driver's self-test uses it:
//   - MAC loopback, RCTL.LBM (bits 7:6) = 01b: the 82574 datasheet lists
//     "MAC loopback" among its MAC features; the encoding is Linux
//     defines.h E1000_RCTL_LBM_MAC (0x40). Every frame the MAC transmits
//     goes to its own receiver instead of the wire, through the receive
//     filters and the RX checksum verdicts as a frame from the wire
//     would, and is counted both ways (GPTC/TPT, TPR/GPRC); frames from
//     the wire are not received meanwhile.
//   - PHY loopback, BMCR bit 14 (IEEE 802.3 22.2.4.1.2), which Linux's
//     ethtool test uses for the 82574 (e1000_integrated_phy_loopback):
//     the same path here.
//
// QEMU 7.2's e1000e loops on either (hw/net/e1000e_core.c
// e1000e_tx_pkt_send). The rule the model adds: MAC loopback needs the
// MAC's link forced up at full duplex, CTRL.SLU and CTRL.FD, which every
// MAC loopback set-up of Intel's drivers writes (Linux ethtool.c
// e1000_set_es2lan_mac_loopback: SLU, FRCSPD, FRCDPX, SPD_1000, FD); a
// frame transmitted in MAC loopback without them is a violation and is
// lost.
const (
	rctlLBMMask = 3 << 6
	rctlLBMMAC  = 1 << 6
	bmcrLoop    = 1 << 14
	ctrlSLU     = 1 << 6
	ctrlFD      = 1 << 0
)

// Faults the model can inject, to prove the driver's self-test fails on
// each (SetFaults). Each counts down as it fires.
type Faults struct {
	// StaleLine: the next StaleLine TX buffer reads longer than a cache
	// line return their second cache line (by device address) as zeros:
	// RAM as it was before the CPU's writes reached it, a buffer the
	// driver did not clean.
	StaleLine int
	// WrongVerdict: the next WrongVerdict received frames with a TCP or
	// UDP verdict get the opposite one (TCPE set on a good checksum,
	// cleared on a bad one).
	WrongVerdict int
	// DropLoop: the next DropLoop looped-back frames are lost, with no
	// counter.
	DropLoop int
}

// SetFaults arms f, replacing the faults still armed.
func (m *Model) SetFaults(f Faults) {
	m.mu.Lock()
	m.faults = f
	m.mu.Unlock()
}

// looping reports whether transmitted frames loop back (MAC or PHY
// loopback), unless Options.NoLoopback.
func (m *Model) looping() bool {
	return !m.opts.NoLoopback && (m.reg[rRCTL]&rctlLBMMask == rctlLBMMAC || m.phy[0]&bmcrLoop != 0)
}

// loop hands transmitted frame f to the receiver.
func (m *Model) loop(f []byte) {
	if m.reg[rRCTL]&rctlLBMMask == rctlLBMMAC && m.reg[rCTRL]&(ctrlSLU|ctrlFD) != ctrlSLU|ctrlFD {
		m.violate("frame transmitted in MAC loopback (RCTL.LBM 01b) with CTRL %#x: the MAC's link is not forced up at full duplex (CTRL.SLU and CTRL.FD; Linux e1000_set_es2lan_mac_loopback)", m.reg[rCTRL])
		return
	}
	if m.faults.DropLoop > 0 {
		m.faults.DropLoop--
		m.st.LoopDropped++
		return
	}
	m.st.Looped++
	m.receive(append([]byte(nil), f...), 0)
}

// staleLine applies Faults.StaleLine to b, read from device address a.
func (m *Model) staleLine(a dma.Addr, b []byte) {
	if m.faults.StaleLine == 0 {
		return
	}
	lo := int((dma.CacheLine - uint64(a)%dma.CacheLine) % dma.CacheLine)
	if lo == 0 {
		lo = dma.CacheLine
	}
	if lo >= len(b) {
		return
	}
	m.faults.StaleLine--
	clear(b[lo:min(lo+dma.CacheLine, len(b))])
}
