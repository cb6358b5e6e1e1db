package mcimx7d

// ENET1's ipg_clk, from which the MAC divides MDC (fec.Config.IPGClock).
//
// On the i.MX7D, ENET1's "ipg" clock is enet1_ipg_root_clk, a gate of the
// ENET_AXI clock root (Linux imx7d.dtsi: fec1 clocks "ipg" =
// IMX7D_ENET1_IPG_ROOT_CLK; clk-imx7d.c: enet1_ipg_root_clk gates
// enet_axi_post_div). The root's target register, CCM_TARGET_ROOT for
// ENET_AXI at CCM + 0x8900 (clk-imx7d.c: enet_axi_src at base + 0x8900;
// 0x8880 is DISP_AXI's; i.MX 7Dual RM, CCM chapter, "Target Register"),
// holds MUX in bits 26:24, PRE_PODF in 18:16 and POST_PODF in 5:0; the
// root runs at parent / (PRE_PODF+1) / (POST_PODF+1). Its parents
// (clk-imx7d.c enet_axi_sel): the 24 MHz oscillator, PLL_SYS_PFD2
// (270 MHz), PLL_DRAM (533 MHz), PLL_ENET's 250 MHz output, PLL_SYS_MAIN's
// 240 MHz output, then the audio PLL, the video PLL and PLL_SYS_PFD4, whose
// rates depend on their own set-up. None of them is the 66 MHz the i.MX6's
// ipg_clk runs at: from PLL_ENET's 250 MHz, say, an MII_SPEED computed for
// 66 MHz would run MDC at about 9 MHz, far over the 2.5 MHz the MDIO
// interface allows (IEEE 802.3 22.2.2.13).
const (
	ccmTargetRootENETAXI = 0x8900 // offset in the CCM

	// unknownParentHz stands for a parent whose rate is not known here:
	// the highest ipg_clk MII_SPEED (6 bits) can still divide to 2.5 MHz,
	// so MDC stays in range when the real clock is at or under it.
	unknownParentHz = 320_000_000
)

// enetAXIRate returns the ENET_AXI root's rate from its CCM target register.
func enetAXIRate(target uint32) uint32 {
	parents := [8]uint32{24_000_000, 270_000_000, 533_000_000, 250_000_000, 240_000_000,
		unknownParentHz, unknownParentHz, unknownParentHz}
	p := parents[target>>24&7]
	if p == unknownParentHz {
		return p
	}
	pre, post := target>>16&7+1, target&0x3F+1
	return p / pre / post
}
