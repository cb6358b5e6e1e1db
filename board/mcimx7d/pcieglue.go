package mcimx7d

import (
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/internal/mmio"
)

// The i.MX7D PCIe needs clocks, a power domain and a slot reset that
// neither the SoC's reset state nor U-Boot (which does not bring up the
// i.MX7 PCIe) provide; Linux gets them from the device tree (imx7d.dtsi
// pcie node: clocks pcie_ctrl_root_clk, pll_enet_main_100m_clk,
// pcie_phy_root_clk; assigned-clock-parents 250 MHz and 100 MHz of the
// ENET PLL; power-domains pgc_pcie_phy; imx7d-sdb.dts reset-gpio =
// extended_io 1, active low). pcieGlue does the same with registers:
//
//  1. vdd1p0d, the anatop LDO that supplies pgc_pcie_phy (imx7s.dtsi
//     reg_1p0d: ANATOP + 0x210, output in bits 12:8, 0.8 V at 8 in 25 mV
//     steps, enable bit 0; gpcv2.c sets the domain's 1.0 V): 1.0 V, on.
//  2. The pgc_pcie_phy power domain (gpcv2.c imx_gpc_pu_pgc_sw_pxx_req
//     for IMX7_POWER_DOMAIN_PCIE_PHY): the domain mapped to the A7
//     (GPC_PGC_CPU_MAPPING 0xEC bit 3), its power-up requested
//     (GPC_PU_PGC_SW_PUP_REQ 0xF8 bit 1) and the request waited for until
//     the GPC clears it, at most 1 ms ("5.5.9.4 Example Code 4" of the
//     i.MX7D reference manual), then unmapped.
//  3. The ENET PLL (CCM_ANALOG_PLL_ENET, ANATOP + 0xE0; clk-imx7d.c): up
//     (POWERDOWN bit 5 clear, clk-pllv3.c IMX7_ENET_PLL_POWER) and locked
//     (bit 31, 10 ms as clk-pllv3.c), not bypassed (bit 16), its 250 MHz
//     (bit 11) and 100 MHz (bit 9) outputs enabled.
//  4. The clock roots (CCM_TARGET_ROOT, clk-imx7d.c pcie_ctrl_src at
//     CCM + 0xA180 and pcie_phy_src at CCM + 0xA200): MUX (26:24) 1, the
//     ENET PLL's 250 MHz for PCIE_CTRL (pcie_ctrl_sel) and its 100 MHz for
//     PCIE_PHY (pcie_phy_sel), dividers (18:16, 5:0) 1, ENABLE (bit 28);
//     read back.
//  5. The CCGR gate both roots share (clk-imx7d.c pcie_ctrl_root_clk and
//     pcie_phy_root_clk: imx_clk_gate4 at CCM + 0x4600, shift 0: bits 1:0
//     = 3, needed in every mode), through its SET alias (+4).
//
// The slot's PERST# is Q1 (PCIE_RST_B) of the SabreSD's 74HC595, which
// three GPIO1 pins drive (U-Boot mx7dsabresd.c iox74lv_init: SDI GPIO1_IO09,
// STCP GPIO1_IO12, SHCP GPIO1_IO13; Q0 PCIE_DIS_B, Q1 PCIE_RST_B, Q2
// HDMI_RST_B, Q3 PERI_RST_B, Q4 SENSOR_RST_B, Q5 ENET_RST_B, Q6
// PERI_3V3_EN, Q7 LCD_PWR_EN). A 74HC595 cannot be read back, so every
// write shifts all eight outputs: the others as U-Boot leaves them (Q0
// low, Q2-Q7 high: resets released, supplies on), Q1 low to hold the slot
// in reset and high to release it. The three pads are muxed as GPIOs
// first (ALT0 in IOMUXC SW_MUX_CTL_PAD_GPIO1_IO09/12/13 at 0x18, 0x24,
// 0x28: Linux imx7d-pinfunc.h MX7D_PAD_GPIO1_IO09__GPIO1_IO9 and the
// others), as NXP's U-Boot for the board does (mx7dsabresd.c iox_pads,
// before iox74lv_init, NO_PAD_CTRL: their pad control is left as it is);
// mainline U-Boot's mx7dsabresd.c has no 74HC595 code at all (Linux muxes
// the pads itself, imx7d-sdb.dts pinctrl_spi4, pad control 0x59), so under
// it they were at their reset function and the shifts went nowhere.
//
// What is not done: the regulator SW2 of the PFUZE3000 PMIC that feeds
// vdd1p0d is the PMIC's (on at power-up); the QEMU 7.2 machine models the
// CCM and ANATOP as plain registers (PLL_ENET resets locked, outputs on),
// the GPC's power-up request as clearing at once, and GPIO1; the 74HC595
// itself is not modelled there.
type pcieGlue struct {
	anatop, ccm, gpc, gpio1, iomuxc mmio.Regs
	now                             func() int64
	delay                           func(time.Duration)
}

// Errors of the PCIe glue.
var (
	ErrPCIePower = errors.New("mcimx7d: PCIe power domain did not power up")
	ErrPCIeClock = errors.New("mcimx7d: PCIe clock not running")
)

// ANATOP (0x3036_0000) registers and fields.
const (
	anatopPLLENET    = 0x0E0
	anatopSet        = 0x4 // SET alias of a register with SET/CLR/TOG
	anatopClr        = 0x8
	pllENETPowerDown = 1 << 5
	pllENET100M      = 1 << 9
	pllENET250M      = 1 << 11
	pllBypass        = 1 << 16
	pllLock          = 1 << 31
	pllLockWait      = 10 * time.Millisecond

	anatopReg1P0D  = 0x210
	reg1P0DEnable  = 1 << 0
	reg1P0DTrgMask = 0x1F << 8
	reg1P0D1V0     = (8 + (1_000_000-800_000)/25_000) << 8 // 16: 1.0 V
)

// CCM (0x3038_0000) registers and fields.
const (
	ccmCCGRPCIe         = 0x4600
	ccmCCGRSet          = 0x4
	ccgrAlways          = 0x3
	ccmTargetRootPCIe   = 0xA180
	ccmTargetRootPCIePH = 0xA200
	targetEnable        = 1 << 28
	targetMuxShift      = 24
	targetMuxENET250    = 1 // pcie_ctrl_sel[1]: pll_enet_250m_clk
	targetMuxENET100    = 1 // pcie_phy_sel[1]: pll_enet_100m_clk
)

// GPC (0x303A_0000) registers and fields (gpcv2.c).
const (
	gpcPGCCPUMapping = 0x0EC
	gpcPUPReq        = 0x0F8
	gpcPCIePHYMapA7  = 1 << 3 // IMX7_PCIE_PHY_A_CORE_DOMAIN
	gpcPCIePHYReq    = 1 << 1 // IMX7_PCIE_PHY_SW_Pxx_REQ
	gpcPUPWait       = time.Millisecond
)

// GPIO1 (0x3020_0000) registers and the 74HC595's pins and outputs.
const (
	gpioDR   = 0x00
	gpioGDIR = 0x04
	ioxSDI   = 1 << 9
	ioxSTCP  = 1 << 12
	ioxSHCP  = 1 << 13
	ioxPins  = ioxSDI | ioxSTCP | ioxSHCP
	ioxEdge  = 10 * time.Microsecond

	ioxPCIeRst = 1 << 1 // Q1, PCIE_RST_B: PERST#, active low
	// IOMUXC SW_MUX_CTL_PAD_GPIO1_IO09, _IO12, _IO13 (imx7d-pinfunc.h);
	// MUX_MODE 0 (ALT0) is GPIO1_IOnn, SION clear.
	muxGPIO1IO09 = 0x0018
	muxGPIO1IO12 = 0x0024
	muxGPIO1IO13 = 0x0028
	// ioxIdle is U-Boot's final state of the outputs: Q0 (PCIE_DIS_B)
	// low, Q1-Q5 (resets) released, Q6 and Q7 (supplies) on.
	ioxIdle = 0xFE
)

// waitFor polls cond until it holds or d has passed.
func (g pcieGlue) waitFor(d time.Duration, cond func() bool) bool {
	end := g.now() + int64(d)
	for !cond() {
		if g.now() > end {
			return cond()
		}
		g.delay(10 * time.Microsecond)
	}
	return true
}

// clocks powers the PCIe PHY domain and starts the PCIe clocks (steps 1-5
// above); it is pcie.Config.Clocks.
func (g pcieGlue) clocks() error {
	v := g.anatop.Read32(anatopReg1P0D)
	g.anatop.Write32(anatopReg1P0D, v&^reg1P0DTrgMask|reg1P0D1V0|reg1P0DEnable)

	g.gpc.Write32(gpcPGCCPUMapping, g.gpc.Read32(gpcPGCCPUMapping)|gpcPCIePHYMapA7)
	g.gpc.Write32(gpcPUPReq, g.gpc.Read32(gpcPUPReq)|gpcPCIePHYReq)
	up := g.waitFor(gpcPUPWait, func() bool { return g.gpc.Read32(gpcPUPReq)&gpcPCIePHYReq == 0 })
	g.gpc.Write32(gpcPGCCPUMapping, g.gpc.Read32(gpcPGCCPUMapping)&^gpcPCIePHYMapA7)
	if !up {
		return fmt.Errorf("%w: GPC_PU_PGC_SW_PUP_REQ %#x after %v", ErrPCIePower, g.gpc.Read32(gpcPUPReq), gpcPUPWait)
	}

	if g.anatop.Read32(anatopPLLENET)&pllENETPowerDown != 0 {
		g.anatop.Write32(anatopPLLENET+anatopClr, pllENETPowerDown)
	}
	if !g.waitFor(pllLockWait, func() bool { return g.anatop.Read32(anatopPLLENET)&pllLock != 0 }) {
		return fmt.Errorf("%w: ENET PLL not locked (CCM_ANALOG_PLL_ENET %#08x)", ErrPCIeClock, g.anatop.Read32(anatopPLLENET))
	}
	if v := g.anatop.Read32(anatopPLLENET); v&pllBypass != 0 {
		return fmt.Errorf("%w: ENET PLL bypassed (CCM_ANALOG_PLL_ENET %#08x)", ErrPCIeClock, v)
	}
	g.anatop.Write32(anatopPLLENET+anatopSet, pllENET250M|pllENET100M)

	for _, r := range []struct {
		off, mux uint32
	}{{ccmTargetRootPCIe, targetMuxENET250}, {ccmTargetRootPCIePH, targetMuxENET100}} {
		want := targetEnable | r.mux<<targetMuxShift
		g.ccm.Write32(r.off, want)
		if got := g.ccm.Read32(r.off); got != want {
			return fmt.Errorf("%w: CCM_TARGET_ROOT at %#x reads %#08x, wrote %#08x", ErrPCIeClock, r.off, got, want)
		}
	}
	g.ccm.Write32(ccmCCGRPCIe+ccmCCGRSet, ccgrAlways)
	if v := g.ccm.Read32(ccmCCGRPCIe); v&ccgrAlways != ccgrAlways {
		return fmt.Errorf("%w: CCGR at %#x reads %#08x", ErrPCIeClock, ccmCCGRPCIe, v)
	}
	return nil
}

// perst drives the slot's PERST# through the 74HC595 (pcie.Config.PERST):
// all eight outputs shifted in, Q7 first, on SHCP's rising edges, then
// latched on STCP's.
func (g pcieGlue) perst(assert bool) {
	q := uint32(ioxIdle)
	if assert {
		q &^= ioxPCIeRst
	}
	for _, mux := range []uint32{muxGPIO1IO09, muxGPIO1IO12, muxGPIO1IO13} {
		g.iomuxc.Write32(mux, 0)
	}
	g.gpio1.Write32(gpioGDIR, g.gpio1.Read32(gpioGDIR)|ioxPins)
	dr := g.gpio1.Read32(gpioDR) &^ ioxPins
	set := func(v uint32) {
		g.gpio1.Write32(gpioDR, dr|v)
		g.delay(ioxEdge)
	}
	for i := 7; i >= 0; i-- {
		sdi := uint32(0)
		if q>>i&1 != 0 {
			sdi = ioxSDI
		}
		set(sdi)
		set(sdi | ioxSHCP)
	}
	set(0)
	set(ioxSTCP)
}
