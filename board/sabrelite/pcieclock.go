package sabrelite

import (
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// The PCIe clocks of the i.MX6Q, which the root complex's glue (package
// pcie: GPR1 TEST_PD / REF_CLK_EN) does not own. Sources: Linux
// drivers/clk/imx/clk-imx6q.c (pcie_axi gate in CCM_CCGR4 bits 1:0,
// pcie_axi_sel in CCM_CBCMR bit 10; sata_ref_100m and pcie_ref_125m,
// the ENET PLL's /5 and /4 outputs gated by CCM_ANALOG_PLL_ENET bits 20
// and 19; lvds1_sel in PMU_MISC1 bits 4:0 with its output enable at bit
// 10, exclusive with the input enable at bit 12) and U-Boot
// arch/arm/mach-imx/mx6/clock.c enable_pcie_clock / enable_enet_pll
// (the order: LVDS1 output from the SATA reference, PCIe AXI from AXI,
// gate on, then the PLL powered, enabled, locked, unbypassed and its
// outputs enabled). The PHY takes pcie_ref_125m, its 125 MHz default
// (pcie.Config.PHYRefClock 0); the slot's 100 MHz reference clock is the
// SATA reference driven out on the CLK1_P/N pads through LVDS1 (Linux
// imx6qdl.dtsi pcie clocks: pcie_axi, lvds1_gate, pcie_ref_125m).
const (
	CCM_CBCMR                = 0x18    // i.MX6DQ RM 18.6.5
	CBCMR_PCIE_AXI_CLK_SEL   = 1 << 10 // 0: AXI, 1: AHB
	CCM_CCGR4                = 0x78    // i.MX6DQ RM 18.6.27
	CCGR4_CG0_PCIE           = 3 << 0  // pcie_axi clock gate, on in all modes
	ANADIG_PLL_ENET          = 0xE0    // CCM_ANALOG_PLL_ENETn, i.MX6DQ RM 18.7.11
	PLL_ENET_LOCK            = 1 << 31
	PLL_ENET_ENABLE_100M     = 1 << 20 // sata_ref_100m (ENET PLL / 5)
	PLL_ENET_ENABLE_125M     = 1 << 19 // pcie_ref_125m (ENET PLL / 4)
	PLL_ENET_BYPASS          = 1 << 16
	PLL_ENET_ENABLE          = 1 << 13
	PLL_ENET_POWERDOWN       = 1 << 12
	PMU_MISC1                = 0x160 // "ANATOP_MISC1" in U-Boot (PMU chapter of the RM)
	MISC1_LVDSCLK1_IBEN      = 1 << 12
	MISC1_LVDSCLK1_OBEN      = 1 << 10
	MISC1_LVDS1_CLK_SEL      = 0x1F
	MISC1_LVDS1_CLK_SEL_SATA = 0xB // sata_ref_100m (lvds_sels in clk-imx6q.c)
)

// PLLLockTimeout bounds the wait for the ENET PLL to lock. The PLL locks
// in well under a millisecond (U-Boot polls 100000 register reads).
const PLLLockTimeout = 10 * time.Millisecond

// ErrENETPLLLock is returned when the ENET PLL does not lock.
var ErrENETPLLLock = errors.New("sabrelite: ENET PLL did not lock")

// EnablePCIeClocks turns on the clocks the PCIe root complex and the slot
// need, on the CCM and the analog block (CCM_ANALOG/PMU at AnatopBase),
// waiting for the ENET PLL's lock at most PLLLockTimeout. The ENET PLL
// also clocks the ENET's reference: it is never powered down or divided
// differently here, only enabled if it was not.
func EnablePCIeClocks(ccm, anatop mmio.Regs, now func() int64, delay func(time.Duration)) error {
	m := anatop.Read32(PMU_MISC1)
	anatop.Write32(PMU_MISC1, m&^(MISC1_LVDSCLK1_IBEN|MISC1_LVDS1_CLK_SEL)|MISC1_LVDSCLK1_OBEN|MISC1_LVDS1_CLK_SEL_SATA)
	ccm.Write32(CCM_CBCMR, ccm.Read32(CCM_CBCMR)&^CBCMR_PCIE_AXI_CLK_SEL)
	ccm.Write32(CCM_CCGR4, ccm.Read32(CCM_CCGR4)|CCGR4_CG0_PCIE)

	v := anatop.Read32(ANADIG_PLL_ENET) &^ PLL_ENET_POWERDOWN
	anatop.Write32(ANADIG_PLL_ENET, v)
	v |= PLL_ENET_ENABLE
	anatop.Write32(ANADIG_PLL_ENET, v)
	end := now() + int64(PLLLockTimeout)
	for anatop.Read32(ANADIG_PLL_ENET)&PLL_ENET_LOCK == 0 {
		if now() > end {
			return fmt.Errorf("%w after %v (CCM_ANALOG_PLL_ENET %#08x)", ErrENETPLLLock, PLLLockTimeout, anatop.Read32(ANADIG_PLL_ENET))
		}
		delay(10 * time.Microsecond)
	}
	v &^= PLL_ENET_BYPASS
	anatop.Write32(ANADIG_PLL_ENET, v)
	anatop.Write32(ANADIG_PLL_ENET, v|PLL_ENET_ENABLE_100M|PLL_ENET_ENABLE_125M)
	return nil
}

// PCIeConfig is the root complex configuration of the SABRE Lite: the
// i.MX6Q integration (pcie.IMX6Q: DBI at 0x01FF_C000, the configuration
// window at 0x01F0_0000, the 15 MiB memory window at 0x0100_0000, BARs
// assigned below DDR so a 32 MiB BAR is reached through sub-windows),
// the IOMUXC GPR block, the clocks above and perst as the slot's PERST#
// (nil: none). Register blocks are the caller's (mmio.Block on the
// board, models on the host).
//
// The SABRE Lite's PCIe reset is not a GPIO the software drives: Linux
// imx6qdl-sabrelite.dtsi gives its pcie node no reset-gpio, and U-Boot's
// nitrogen6x.h (the SABRE Lite's configuration) no
// CONFIG_PCIE_IMX_PERST_GPIO. GPIO7_IO12, the PERST# of NXP's SABRE SD
// (imx6qdl-sabresd.dtsi reset-gpio = <&gpio7 12 GPIO_ACTIVE_LOW>), is the
// USB host port's VBUS enable on the SABRE Lite (imx6qdl-sabrelite.dtsi
// reg_usb_h1_vbus, pad GPIO_17), so the board passes nil; a board with a
// PERST# GPIO passes GPIOLine.Drive.
func PCIeConfig(dbi, gpr, ccm, anatop, cfg, mem mmio.Regs, perst func(assert bool), now func() int64, delay func(time.Duration)) pcie.Config {
	return pcie.Config{SoC: pcie.IMX6Q, DBI: dbi, GPR: gpr, Cfg: cfg, Mem: mem,
		Nanotime: now, Delay: delay,
		Clocks: func() error { return EnablePCIeClocks(ccm, anatop, now, delay) },
		PERST:  perst,
	}
}

// i.MX6 GPIO bank registers (i.MX6DQ RM, GPIO chapter: GPIOx_DR at +0x00,
// GPIOx_GDIR at +0x04).
const (
	GPIO_DR   = 0x00
	GPIO_GDIR = 0x04
)

// GPIOLine is one GPIO output: Regs is its bank, Pin the bit; ActiveLow
// when asserting drives the pad low (PERST# is active low). The pad must
// already be muxed to its GPIO function (by the boot loader).
type GPIOLine struct {
	Regs      mmio.Regs
	Pin       int
	ActiveLow bool
}

// Drive sets the line's level for assert and makes it an output, level
// first so the pad never glitches to the other state.
func (l GPIOLine) Drive(assert bool) {
	high := assert != l.ActiveLow
	bit := uint32(1) << l.Pin
	dr := l.Regs.Read32(GPIO_DR) &^ bit
	if high {
		dr |= bit
	}
	l.Regs.Write32(GPIO_DR, dr)
	l.Regs.Write32(GPIO_GDIR, l.Regs.Read32(GPIO_GDIR)|bit)
}
