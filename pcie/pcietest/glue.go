package pcietest

import (
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// PHYReg returns an i.MX6 PHY register (as written through PHY_CTRL).
func (h *Host) PHYReg(addr uint16) uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phyRegs[addr]
}

// PHYWrites returns every PHY register write so far, in order.
func (h *Host) PHYWrites() []PHYWrite {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]PHYWrite(nil), h.phyLog...)
}

// phyCtrlWrite runs the PHY_CTRL handshake: each strobe (capture address,
// capture data, write, read) acts on its rising edge and is acknowledged
// in PHY_STAT while it is held.
func (h *Host) phyCtrlWrite(v uint32) {
	rising := v &^ h.phyCtrl & 0xF_0000
	h.phyCtrl = v
	if rising&(1<<16) != 0 {
		h.phyAddr = uint16(v)
	}
	if rising&(1<<17) != 0 {
		h.phyData = uint16(v)
	}
	if rising&(1<<18) != 0 {
		h.phyRegs[h.phyAddr] = h.phyData
		h.phyLog = append(h.phyLog, PHYWrite{h.phyAddr, h.phyData})
	}
	if rising&(1<<19) != 0 {
		h.phyOut = h.phyRegs[h.phyAddr]
	}
}

func (h *Host) phyStatus() uint32 {
	v := uint32(h.phyOut)
	if h.phyCtrl&0xF_0000 != 0 && !h.opts.PHYStuck {
		v |= 1 << 16
	}
	return v
}

type regs struct {
	h     *Host
	read  func(off uint32) uint32
	write func(off, v uint32)
}

func (r regs) Read32(off uint32) uint32 {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	return r.read(off)
}

func (r regs) Write32(off, v uint32) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.write(off, v)
}

// GPR returns the IOMUXC GPR block.
func (h *Host) GPR() mmio.Regs {
	return regs{h, func(off uint32) uint32 {
		if off/4 >= uint32(len(h.gpr)) {
			h.violate("GPR read %#x beyond the block", off)
			return 0
		}
		v := h.gpr[off/4]
		if off == 0x58 && h.soc.Glue == pcie.GlueIMX7D && h.pllLocked() {
			v |= 1 << 31
		}
		return v
	}, func(off, v uint32) {
		if off/4 >= uint32(len(h.gpr)) {
			h.violate("GPR write %#x beyond the block", off)
			return
		}
		h.gpr[off/4] = v
		h.glueChanged()
	}}
}

// SRC returns the i.MX7D System Reset Controller. Asserting the PHY's
// global reset (SRC_PCIEPHY_RCR bit 1) returns the PHY block's registers
// to their reset values, so the ERR010728 settings must be written after
// it is released, as Linux pci-imx6.c does (imx6_pcie_deassert_core_reset:
// reset_control_deassert(pciephy_reset), then the CMN_REG4/24/26 writes,
// then imx7d_pcie_wait_for_phy_pll_lock). UNCONFIRMED on silicon: no
// public source says a write to the PHY in reset is lost; the model
// takes the conservative reading.
func (h *Host) SRC() mmio.Regs {
	return regs{h, func(off uint32) uint32 { return h.src[(off/4)%32] },
		func(off, v uint32) {
			h.src[(off/4)%32] = v
			if off == 0x2C && v&(1<<1) != 0 {
				clear(h.phy)
			}
			h.glueChanged()
		}}
}

// PHY returns the i.MX7D PCIe PHY block; a write while the PHY is held
// in reset is reported and lost (see SRC).
func (h *Host) PHY() mmio.Regs {
	return regs{h, func(off uint32) uint32 { return h.phy[off] },
		func(off, v uint32) {
			if h.src[0x2C/4]&(1<<1) != 0 {
				h.violate("PHY write %#x at %#x while SRC_PCIEPHY_RCR holds the PHY in reset: lost", v, off)
				return
			}
			h.phy[off] = v
		}}
}

func (h *Host) pllLocked() bool {
	// The PHY is out of reset and ERR010728's settings are in.
	return !h.opts.PLLNeverLocks && h.src[0x2C/4]&(3<<1) == 0 &&
		h.phy[0x14] == 0x29 && h.phy[0x90] == 0x48 && h.phy[0x98] == 0xBC
}

// glueReady says whether the glue lets the link train, and ltssm whether
// training is enabled. Bits audited against Linux pci-imx6.c and
// include/linux/mfd/syscon/imx6q-iomuxc-gpr.h / imx7-iomuxc-gpr.h:
// GPR12 DEVICE_TYPE 15:12 = PCI_EXP_TYPE_ROOT_PORT (4), GPR12 bit 10
// (IMX6Q_GPR12_PCIE_CTL_2, LTSSM enable on i.MX6Q/SX), GPR1 bit 16
// REF_CLK_EN and bit 18 TEST_PD (i.MX6Q), GPR12 bit 30 TEST_POWERDOWN and
// GPR5 bit 19 BTNRST_RESET (i.MX6SX), GPR12 bit 5 PHY_REFCLK_SEL and GPR22
// bit 31 PHY_PLL_LOCKED (i.MX7D), SRC_PCIEPHY_RCR 0x2C bits 1/2 (PHY G_RST,
// BTN) and bit 6 PCIE_CTRL_APPS_EN (reset-imx7.c). ERR010728's PHY values
// 0x14=0x29 (CMN_REG4 DCC_FB_EN), 0x90=0x48 (CMN_REG24 RX_EQ|RX_EQ_SEL),
// 0x98=0xBC (CMN_REG26 ATT_MODE) are pci-imx6.c's, written in
// imx6_pcie_deassert_core_reset before imx7d_pcie_wait_for_phy_pll_lock.
func (h *Host) glueReady() (ready, ltssm bool) {
	g1, g5, g12 := h.gpr[1], h.gpr[5], h.gpr[12]
	rc := g12&(0xF<<12) == 4<<12
	switch h.soc.Glue {
	case pcie.GlueIMX6Q:
		return rc && g1&(1<<16) != 0 && g1&(1<<18) == 0, g12&(1<<10) != 0
	case pcie.GlueIMX6SX:
		return rc && g12&(1<<30) == 0 && g5&(1<<19) == 0, g12&(1<<10) != 0
	case pcie.GlueIMX7D:
		return rc && g12&(1<<5) == 0 && h.pllLocked(), h.src[0x2C/4]&(1<<6) != 0
	}
	return false, false
}

func (h *Host) glueChanged() {
	if ready, on := h.glueReady(); !ready || !on {
		h.linkUp, h.polls, h.gen = false, 0, 0
		h.root.put16(0x70+0x12, 0)
	}
}

func (h *Host) rootLnkCapGen() int { return int(h.root.get32(0x70+0x0C) & 0xF) }

func (h *Host) setGen(g int) {
	h.gen = g
	h.root.put16(0x70+0x12, uint16(g|1<<4))
}
