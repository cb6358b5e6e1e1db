package pcie

import (
	"fmt"
	"time"
)

// Glue selects the SoC-specific clock, PHY, reset and LTSSM-enable wiring
// around the DesignWare core.
type Glue int

// The supported integrations.
const (
	GlueIMX6Q  Glue = iota + 1 // i.MX6Q/DL: IOMUXC GPR1/GPR8/GPR12
	GlueIMX6SX                 // i.MX6SX: GPR5 button reset, GPR12 power-down
	GlueIMX7D                  // i.MX7D: SRC PCIEPHY_RCR, GPR12/GPR22, PHY block
)

func (g Glue) String() string {
	switch g {
	case GlueIMX6Q:
		return "i.MX6Q"
	case GlueIMX6SX:
		return "i.MX6SX"
	case GlueIMX7D:
		return "i.MX7D"
	}
	return fmt.Sprintf("Glue(%d)", int(g))
}

// SoC describes one integration of the core: where things are and what it
// does differently. Addresses are CPU physical addresses; BusMem* is the PCI
// bus address range BARs are assigned from.
type SoC struct {
	Name string
	Glue Glue

	DBIBase uint64 // the core's registers
	// DBISize is what a DBI access may reach (QEMU 7.2 maps only 4 KiB).
	DBISize uint32
	// RCConfigSize limits configuration accesses to the root port itself:
	// on the i.MX6Q reads beyond 0x200 abort (Linux pci-imx6.c drvdata
	// .dbi_length = 0x200 for IMX6Q and IMX6QP). Linux sets no
	// dbi_length for IMX6SX; the 0x200 used there is an UNCONFIRMED,
	// conservative choice.
	RCConfigSize uint32

	ConfigBase uint64 // outbound configuration window (CPU)
	ConfigSize uint64
	MemBase    uint64 // outbound memory window (CPU)
	MemSize    uint64
	// BusMemBase/BusMemSize is the bus address range BARs get. It may be
	// larger than the CPU window: the memory viewport is then retargeted
	// (Map) so a BAR larger than the window can still be reached in
	// parts. It must not overlap DDR, or device DMA to DDR would be taken
	// for peer-to-peer traffic and never reach memory.
	BusMemBase uint64
	BusMemSize uint64

	// Viewports is the number of outbound iATU regions.
	Viewports int
	// SpeedChangeClears: PL_G2CR's directed speed change bit clears when
	// the change is done (i.MX6). On the i.MX7D it may never clear.
	SpeedChangeClears bool
	// AbortsOnUR: a configuration read that ends in Unsupported Request
	// (no such device) raises an imprecise external abort instead of
	// reading all-ones (i.MX6Q). The driver then probes only device 0
	// of a link (skipping a downstream port that reports its link down),
	// on other buses only the devices Config.ProbeDevices names, and
	// functions 1-7 only with Config.ProbeFunctions.
	AbortsOnUR bool

	// GIC SPI numbers (interrupt ID = SPI + 32): MSI and INTA..INTD.
	MSISPI  int
	INTxSPI [4]int
}

// The SoCs. Sources: Linux imx6qdl.dtsi / imx6sx.dtsi / imx7d.dtsi PCIe
// nodes and pci-imx6.c (dbi_length, speed change), U-Boot pcie_imx.c, QEMU
// 7.2 fsl-imx7.c; see docs connectx-pcie.md §6.1.
var (
	// IMX6Q is the i.MX6Quad/DualLite. The CPU memory window is 15 MiB;
	// BARs are assigned below DDR (which starts at 0x1000_0000), so a
	// 32 MiB BAR gets a bus address the window can be retargeted to.
	IMX6Q = SoC{
		Name: "i.MX6Q", Glue: GlueIMX6Q,
		DBIBase: 0x01FF_C000, DBISize: 16 << 10, RCConfigSize: 0x200,
		ConfigBase: 0x01F0_0000, ConfigSize: 512 << 10,
		MemBase: 0x0100_0000, MemSize: 15 << 20,
		BusMemBase: 0x0100_0000, BusMemSize: 0x0F00_0000,
		Viewports: 4, SpeedChangeClears: true, AbortsOnUR: true,
		MSISPI: 120, INTxSPI: [4]int{123, 122, 121, 120},
	}
	// IMX6SX is the i.MX6SoloX. Its interrupt numbers are not confirmed
	// (docs connectx-pcie.md §6.1); poll or probe them.
	IMX6SX = SoC{
		Name: "i.MX6SX", Glue: GlueIMX6SX,
		DBIBase: 0x08FF_C000, DBISize: 16 << 10, RCConfigSize: 0x200,
		ConfigBase: 0x08F0_0000, ConfigSize: 512 << 10,
		MemBase: 0x0800_0000, MemSize: 15 << 20,
		BusMemBase: 0x0800_0000, BusMemSize: 0x0800_0000,
		Viewports: 4, SpeedChangeClears: true, AbortsOnUR: true,
		MSISPI: 120, INTxSPI: [4]int{123, 122, 121, 120},
	}
	// IMX7D is the i.MX7Dual: a 255 MiB window mapped 1:1. QEMU 7.2's
	// mcimx7d-sabre maps only 4 KiB of DBI, which covers every register
	// the driver uses (the highest is 0x91C).
	IMX7D = SoC{
		Name: "i.MX7D", Glue: GlueIMX7D,
		DBIBase: 0x3380_0000, DBISize: 4 << 10, RCConfigSize: 0x1000,
		ConfigBase: 0x4FF0_0000, ConfigSize: 512 << 10,
		MemBase: 0x4000_0000, MemSize: 0x0FF0_0000,
		BusMemBase: 0x4000_0000, BusMemSize: 0x0FF0_0000,
		Viewports: 4, SpeedChangeClears: false,
		MSISPI: 122, INTxSPI: [4]int{125, 124, 123, 122},
	}
)

// IOMUXC GPR registers and fields (i.MX 6Dual/6Quad RM, chapter IOMUXC,
// IOMUXC_GPRn; Linux include/linux/mfd/syscon/imx6q-iomuxc-gpr.h and
// imx7-iomuxc-gpr.h).
const (
	gpr1  = 0x04
	gpr5  = 0x14
	gpr8  = 0x20
	gpr12 = 0x30
	gpr22 = 0x58

	gpr1PCIeRefClkEn = 1 << 16 // IMX6Q_GPR1_PCIE_REF_CLK_EN
	gpr1PCIeTestPD   = 1 << 18 // IMX6Q_GPR1_PCIE_TEST_PD

	gpr12PCIeCtl2      = 1 << 10 // IMX6Q_GPR12_PCIE_CTL_2: LTSSM enable
	gpr12LOSLevel      = 0x1F << 4
	gpr12LOSLevel9     = 9 << 4
	gpr12DeviceType    = 0xF << 12
	gpr12DeviceTypeRC  = 4 << 12                    // PCI_EXP_TYPE_ROOT_PORT
	gpr12SXRxEq        = 0x7                        // IMX6SX_GPR12_PCIE_RX_EQ_MASK
	gpr12SXRxEq2       = 0x2                        // IMX6SX_GPR12_PCIE_RX_EQ_2
	gpr12SXTestPowerDn = 1 << 30                    // IMX6SX_GPR12_PCIE_TEST_POWERDOWN
	gpr5SXBtnRst       = 1 << 19                    // IMX6SX_GPR5_PCIE_BTNRST_RESET (bit position UNCONFIRMED, docs §6.2)
	gpr12MX7RefClkSel  = 1 << 5                     // IMX7D_GPR12_PCIE_PHY_REFCLK_SEL
	gpr22MX7PLLLocked  = 1 << 31                    // IMX7D_GPR22_PCIE_PHY_PLL_LOCKED
	gpr8Defaults       = 20<<12 | 127<<18 | 127<<25 // TX de-emphasis 0/0/20, swing 127/127
)

// i.MX7D System Reset Controller (i.MX 7Dual RM, SRC_PCIEPHY_RCR; Linux
// include/dt-bindings/reset/imx7-reset.h, drivers/reset/reset-imx7.c).
const (
	srcPCIePHYRCR = 0x2C

	rcrPHYGRst = 1 << 1 // PCIEPHY_G_RST: set = held in reset
	rcrPHYBtn  = 1 << 2 // PCIEPHY_BTN: set = held in reset
	rcrAppsEn  = 1 << 6 // PCIE_CTRL_APPS_EN: set = LTSSM runs
)

// i.MX7D PCIe PHY block: ERR010728 workaround registers (Linux pci-imx6.c).
const (
	phyCMNReg4  = 0x14
	phyCMNReg24 = 0x90
	phyCMNReg26 = 0x98

	phyReg4DCCFBEn  = 0x29
	phyReg24RxEq    = 1<<6 | 1<<3
	phyReg26AttMode = 0xBC
)

// Waits the glue needs (Linux pci-imx6.c and the PCIe CEM specification).
const (
	refClkSettle  = 200 * time.Microsecond // clocks stabilise after enable
	testPDSettle  = 10 * time.Microsecond  // TEST_PD released before REF_CLK_EN
	phyResetHold  = 10 * time.Microsecond  // reset-imx7: >10 µs before releasing the PHY
	pllLockWait   = 400 * time.Millisecond // Linux PHY_PLL_LOCK_WAIT_TIMEOUT
	perstAssert   = 100 * time.Millisecond // PERST# held before release
	perstRelease  = 100 * time.Millisecond // PCIe r5.0 6.6.1: 100 ms before the first access
	speedWait     = 200 * time.Millisecond // 200 polls in Linux
	defaultLinkTO = 900 * time.Millisecond // Linux: 10 retries of 90 ms
	// defaultLinkCheck: a BAR access looks at PL DEBUG1 when the last look
	// is older than this (see RC.pathOpen).
	defaultLinkCheck = 10 * time.Millisecond
	pollInterval     = time.Millisecond
	// recoveryWait bounds the wait for a link in Recovery to return to
	// L0. The substates run one after the other: Recovery.RcvrLock may
	// last 24 ms before Recovery.RcvrCfg, which may last 48 ms before
	// Recovery.Idle and L0 (PCI Express Base 3.0, 4.2.6.4.1/4.2.6.4.3),
	// the link up all along, so a Recovery that ends in L0 may take
	// 72 ms; 100 ms covers it with margin. A link still in Recovery then
	// is not latched lost (see RC.linkState). Linux v3.x waited 5 x 1-2 ms.
	recoveryWait = 100 * time.Millisecond
	recoveryPoll = 100 * time.Microsecond
	// atuEnableTries reads of PL_IATURC2, atuEnableWait apart, wait for
	// a region's enable (Linux LINK_WAIT_MAX_IATU_RETRIES, LINK_WAIT_IATU).
	atuEnableTries = 5
	atuEnableWait  = 9 * time.Millisecond
)
