package tzplan

// Range is one block of physical addresses a CSL slot guards on the
// i.MX6ULL: a peripheral's register block, or memory.
type Range struct {
	Block      string // the block's name in the memory map
	Base, Size uint32
	// Note says what is not confirmed about the range, or "".
	Note string
}

// End returns the first address past r.
func (r Range) End() uint64 { return uint64(r.Base) + uint64(r.Size) }

// aipsSlot is the size of one AIPS peripheral slot: every block below is
// given the whole slot its base starts (IMX6ULLRM chapter 2 "Memory
// Maps", Table 2-1: each AIPS-1/2/3 entry is 16 KB), which is also the
// reg size Linux gives each of them (arch/arm/boot/dts/nxp/imx/
// imx6ul.dtsi, imx6ull.dtsi) unless said otherwise.
const aipsSlot = 0x4000

// SNVS register map (IMX6ULLRM chapter "Secure Non-Volatile Storage":
// the HP registers HPLR..HPTALR at 0x00-0x30, the LP registers from LPLR
// at 0x34; HPVIDR1/2 at 0xBF8/0xBFC). Linux agrees: the dtsi's
// snvs-rtc-lp node has offset 0x34, drivers/nvmem/snvs_lpgpr.c has
// IMX6Q_SNVS_LPLR 0x34 and the 6UL's LPGPR at 0x90, and
// drivers/input/keyboard/snvs_pwrkey.c reads SNVS_HPVIDR1 at 0xBF8.
const (
	snvsBase   = 0x020cc000
	snvsLPLo   = 0x34
	snvsHPVIDR = 0xbf8
)

// SlotRanges returns, for each Closed block name (ClosedSlots, and the
// Secure-only DCP and RNGB slots), the address ranges its CSL slot
// guards. Bases are TamaGo's (soc/nxp/imx6ul: CCM_CCGR0 0x020c4068,
// CCM_ANALOG_PLL_ARM 0x020c8000, SNVS_HP_BASE, SNVS_LP_BASE, SRC_SCR,
// OCOTP_BASE, TZASC_BASE, ENET1_BASE, ENET2_BASE, DCP_BASE, RNGB_BASE,
// OCRAM_START/OCRAM_SIZE; board/nxp/mx6ullevk's IOMUXC pad registers
// 0x020e0xxx; IOMUXC_GPR_GPR1 0x020e4004) or, where TamaGo has none, the
// Linux dtsi's and U-Boot's (arch/arm/include/asm/arch-mx6/imx-regs.h:
// GPC, ROMCP_BASE_ADDR = AIPS2 + 0x2C000, MMDC_P0_BASE_ADDR = AIPS2 +
// 0x30000). TamaGo's MMDC_BASE (0x80000000) is the DDR window, not the
// controller: the CSU guards the controller's registers; DDR is the
// TZASC's.
//
// SNVS: the HP and LP register sets are one block at 0x020CC000, which
// Linux and TamaGo (soc/nxp/snvs: LPSR at Base + 0x4C) reach through the
// one base, and which the memory map names SNVS_HP. The CSU slot TamaGo
// names SNVS_LP (CSL3 slot 1) is a separate AIPS-1 slot, 0x020B0000
// (TamaGo SNVS_LP_BASE, the 6UL's DryIce; U-Boot's MX6UL_SNVS_LP_BASE_ADDR,
// whose GPBIT register arch_cpu_init writes on the 6ULL). So the split is
// modelled as: the whole SNVS block under CCM/SNVS_HP/SRC/GPC (Normal
// World read-only), the 0x020B0000 slot under SNVS_LP, and, because it is
// not confirmed that CSL3 slot 1 leaves the LP registers inside the SNVS
// block alone, those too (0x34 up to HPVIDR1 at 0xBF8) under SNVS_LP:
// the stricter reading. A Normal World access there is reported against
// both slots.
func SlotRanges() map[string][]Range {
	return map[string][]Range{
		"SNVS_LP": {
			{"SNVS_LP", 0x020b0000, aipsSlot, ""},
			{"SNVS LP registers", snvsBase + snvsLPLo, snvsHPVIDR - snvsLPLo,
				"UNCONFIRMED which CSL slot guards the LP registers inside the SNVS block; taken as SNVS_LP's too (stricter)"},
		},
		"CCM/SNVS_HP/SRC/GPC": {
			{"CCM", 0x020c4000, aipsSlot, ""},
			{"SNVS", snvsBase, aipsSlot, "HP and LP registers: one block"},
			{"SRC", 0x020d8000, aipsSlot, ""},
			{"GPC", 0x020dc000, aipsSlot, ""},
		},
		// ANATOP: Linux's reg is 0x1000 (anatop@20c8000); USBPHY1/2 at
		// 0x020C9000/0x020CA000 share its 16 KB AIPS slot, and no other
		// slot names them: taken as ANATOP's (stricter, as for SNVS).
		"ANATOP": {
			{"ANATOP", 0x020c8000, 0x1000, ""},
			{"USBPHY1/2", 0x020c9000, aipsSlot - 0x1000, "UNCONFIRMED that CSL6 slot 0 guards the USB PHYs sharing ANATOP's AIPS slot; taken as ANATOP's (stricter)"},
		},
		"IOMUXC":     {{"IOMUXC", 0x020e0000, aipsSlot, ""}},
		"IOMUXC_GPR": {{"IOMUXC_GPR", 0x020e4000, aipsSlot, ""}},
		"ENET": {
			{"ENET1", 0x02188000, aipsSlot, ""},
			{"ENET2", 0x020b4000, aipsSlot, "UNCONFIRMED that CSL8 slot 1 guards ENET2 (TamaGo's table says ENET)"},
		},
		"ROMCP":      {{"ROMCP", 0x021ac000, aipsSlot, ""}},
		"MMDC":       {{"MMDC", 0x021b0000, aipsSlot, "controller registers (P0); DDR itself is the TZASC's"}},
		"OCOTP_CTRL": {{"OCOTP_CTRL", 0x021bc000, aipsSlot, ""}},
		"TZASC1":     {{"TZASC1", 0x021d0000, aipsSlot, ""}},
		// The memory map aliases the 128 KiB over 0x0092_0000-0x0097_FFFF
		// (QEMU's fsl-imx6ul.c FSL_IMX6UL_OCRAM_ALIAS_ADDR, 384 KiB): the
		// alias reaches the same Secure RAM (a review found it missing).
		"OCRAM": {
			{"OCRAM", 0x00900000, 0x20000, "the ULL's 128 KiB"},
			{"OCRAM alias", 0x00920000, 0x60000, "the same RAM, aliased"},
		},
		"DCP":  {{"DCP", 0x02280000, aipsSlot, ""}},
		"RNGB": {{"RNGB", 0x02284000, aipsSlot, ""}},
	}
}

// Normal World access rights from a CSL level (IMX6ULLRM 11.2.3: bit 3
// NS supervisor read, bit 7 NS supervisor write; TamaGo's Normal World
// runs privileged, so the supervisor bits are the ones that apply).
const (
	cslNSSupRead  = 1 << 3
	cslNSSupWrite = 1 << 7
)

// NormalDenies returns whether a slot at level refuses the Normal
// World's (privileged) reads and writes.
func NormalDenies(level uint32) (read, write bool) {
	return level&cslNSSupRead == 0, level&cslNSSupWrite == 0
}
