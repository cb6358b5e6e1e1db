// Package tzplan is the TrustZone partition of the i.MX6UL/ULL that the
// Trusted OS (firmware/mx6ullevk-tee) leaves in the hardware, as register
// values: the CSU's peripheral access levels (CSL) and bus-master policy
// (SA) with their lock bits, the TZASC (TZC-380) regions and lockdown,
// the IOMUXC GPR bits that protect OCRAM, lock the TZASC and turn off
// debug, the GIC interrupt groups, and the SCR of each world. Apply
// writes them through a Bus; the host tests check every value against
// OP-TEE's i.MX6UL set-up and the reference manual.
//
// What each block is left as, and why (IMX6ULLRM 11.2.3 "CSU peripheral
// access policy", 11.6 CSL slave mapping as TamaGo's soc/nxp/csu lists
// it):
//
//   - Secure only (Normal World: no access): ENET (CSL8 slot 1: the
//     Secure World's NIC), TZASC1 (CSL16 slot 1), OCRAM (CSL39 slot 1),
//     ROMCP (CSL13 slot 0), MMDC (CSL13 slot 1: the DDR controller's
//     address mapping would let Normal World addresses alias Secure
//     DRAM), IOMUXC_GPR (CSL7 slot 0: OCRAM_TZ, the TZASC boot lock, the
//     debug enables, the ENET clock bits), SNVS_LP (CSL3 slot 1), DCP
//     and RNGB (CSL34 slots 0 and 1, i.MX6ULL: the Secure World's
//     entropy and the DCP's OTP and unique keys; OP-TEE's i.MX6ULL table
//     closes CSL34 too, GoTEE-example its DCP slot). The Normal World
//     takes its random bytes from the Secure World (netcall.OpRandom).
//   - Normal World read-only: OCOTP_CTRL (CSL14 slot 1: fuses can be
//     read, never burnt; OP-TEE's earlier {14, 0x3F00FF}), CCM, SNVS_HP,
//     SRC and GPC (CSL5 slot 1: clocks, resets, the ROM's resume address
//     SRC_GPR1, power gating), ANATOP (CSL6 slot 0: PLLs, regulators),
//     IOMUXC (CSL6 slot 1: pad muxing, e.g. ENET1's pins). The Secure
//     World sets up every clock and pad the Normal World uses (UART1,
//     shared console) before it starts it; the Normal World's own
//     start-up (firmware/mx6ullevk-tee/normal/board.go) writes none of
//     these blocks.
//   - Normal World read/write: everything else (UARTs, GPIO, timers,
//     watchdogs, USB, USDHC, SDMA, LCDIF/PXP/CSI, the system counter,
//     ...).
//
// Every CSL register is locked, so none of this changes until reset.
// Every bus master the Normal World can program issues Non-secure
// transactions (CSU_SA), except the CPU (master 0, whose transactions
// carry its own NS bit) and ENET (master 9: the Secure World's rings
// and buffers are Secure memory); all sixteen are locked.
package tzplan

import "fmt"

// Bus reads and writes 32-bit device registers (MMIO on the target, a
// model in the tests).
type Bus interface {
	Read32(addr uint32) uint32
	Write32(addr, v uint32)
}

// Register addresses (i.MX6UL/ULL memory map, IMX6ULLRM chapter 2; the
// same values as TamaGo's soc/nxp/imx6ul).
const (
	CSUBase   = 0x021c0000 // CSU
	CSU_CSL0  = CSUBase + 0x000
	CSU_SA    = CSUBase + 0x218
	NumCSL    = 40         // CSU_CSL0-CSU_CSL39
	TZASCBase = 0x021d0000 // TZASC1 (TZC-380)

	IOMUXC_GPR_GPR1  = 0x020e4004
	IOMUXC_GPR_GPR9  = 0x020e4024 // TZASC1_BYP (bit 0): 1 = TZASC active
	IOMUXC_GPR_GPR10 = 0x020e4028

	GICBase = 0x00a00000 // Cortex-A7 MPCore GIC-400 (GICD +0x1000, GICC +0x2000)
)

// CSL access levels (IMX6ULLRM 11.2.3 CSU_CSLn: bit 7 NS supervisor
// write, 6 NS user write, 5 S supervisor write, 4 S user write, 3 NS
// supervisor read, 2 NS user read, 1 S supervisor read, 0 S user read).
const (
	CSLAll        = 0xff // everyone read/write
	CSLNSReadOnly = 0x3f // Secure read/write, Non-secure read only
	CSLSecure     = 0x33 // Secure read/write, Non-secure nothing
)

// CSL register fields: slot 0 is bits 7:0 with its lock at bit 8, slot 1
// bits 23:16 with its lock at bit 24 (IMX6ULLRM 11.7.1.1 CSU_CSLn, where
// bits 23:16 are the "first slave" and 7:0 the "second"; slot numbers
// here are TamaGo's soc/nxp/csu ones, whose slot 1 is bits 23:16, as
// OP-TEE's {16, 0x3300FF} for TZASC1 and {13, 0xFF0033} for ROMCP
// confirm).
const (
	cslSlot1Shift = 16
	cslLock0      = 1 << 8
	cslLock1      = 1 << 24
)

// Slot is one CSL slave slot: register n, slot 0 or 1.
type Slot struct{ CSL, Slot int }

// Closed is a slot given a level other than CSLAll.
type Closed struct {
	Block string
	At    Slot
	Level uint32
}

// ClosedSlots returns the slots given a level other than CSLAll.
func ClosedSlots() []Closed {
	return []Closed{
		{"SNVS_LP", Slot{3, 1}, CSLSecure},
		{"CCM/SNVS_HP/SRC/GPC", Slot{5, 1}, CSLNSReadOnly},
		{"ANATOP", Slot{6, 0}, CSLNSReadOnly},
		{"IOMUXC", Slot{6, 1}, CSLNSReadOnly},
		{"IOMUXC_GPR", Slot{7, 0}, CSLSecure},
		{"ENET", Slot{8, 1}, CSLSecure},
		{"ROMCP", Slot{13, 0}, CSLSecure},
		{"MMDC", Slot{13, 1}, CSLSecure},
		{"OCOTP_CTRL", Slot{14, 1}, CSLNSReadOnly},
		{"TZASC1", Slot{16, 1}, CSLSecure},
		{"DCP", Slot{34, 0}, CSLSecure},
		{"RNGB", Slot{34, 1}, CSLSecure},
		{"OCRAM", Slot{39, 1}, CSLSecure},
	}
}

// CSL returns the 40 CSU_CSLn values: every slot CSLAll but the Closed
// ones, every slot locked.
func CSL() [NumCSL]uint32 {
	var v [NumCSL]uint32
	for i := range v {
		v[i] = CSLAll<<cslSlot1Shift | CSLAll | cslLock0 | cslLock1
	}
	for _, c := range ClosedSlots() {
		if c.At.Slot == 0 {
			v[c.At.CSL] = v[c.At.CSL]&^0xff | c.Level
		} else {
			v[c.At.CSL] = v[c.At.CSL]&^(0xff<<cslSlot1Shift) | c.Level<<cslSlot1Shift
		}
	}
	return v
}

// Bus masters (CSU_SA: master n's NSA bit is 2n, 1 = Non-secure; its
// lock is bit 2n+1; IMX6ULLRM 11.7.1.4 CSU_SA; master IDs as TamaGo's
// soc/nxp/csu lists them for the UL/ULL).
const (
	MasterCPU  = 0 // Cortex-A7
	MasterENET = 9
	NumMasters = 16
)

// SA returns the CSU_SA value: every master Non-secure but the CPU and
// ENET, every master locked.
func SA() uint32 {
	var v uint32
	for m := 0; m < NumMasters; m++ {
		v |= 1 << (2*m + 1) // lock
		if m != MasterCPU && m != MasterENET {
			v |= 1 << (2 * m) // NSA: Non-secure
		}
	}
	return v
}

// TZASC (TZC-380, ARM DDI 0431C chapter 3) registers and fields.
const (
	TZASC_LOCKDOWN_RANGE  = TZASCBase + 0x008
	TZASC_LOCKDOWN_SELECT = TZASCBase + 0x00c
	tzascRegionLow0       = TZASCBase + 0x100
	tzascRegionHigh0      = TZASCBase + 0x104
	tzascRegionAttrs0     = TZASCBase + 0x108

	// Region attributes: sp (bits 31:28: 3 S read, 2 S write, 1 NS read,
	// 0 NS write), size (bits 6:1, 2^(size+1) bytes), enable (bit 0).
	spSecureRW = 0b1100
	spNormalRW = 0b0011
	// Lockdown: range enable (bit 31) and the region count (all);
	// select: the range register, the region registers and the
	// speculation control locked (bits 0-2).
	lockdownRange  = 1<<31 | 0xf
	lockdownSelect = 0b111
)

// TZASCRegion returns the region attributes register value for a region
// of size bytes (a power of two, at least 32 KiB) with permissions sp,
// enabled.
func TZASCRegion(size uint32, sp uint32) (uint32, error) {
	for s := uint32(14); s < 32; s++ {
		if size == 1<<(s+1) {
			return sp<<28 | s<<1 | 1, nil
		}
	}
	return 0, fmt.Errorf("tzplan: TZASC region of %#x bytes: not a power of two of at least 32 KiB", size)
}

// IOMUXC GPR fields (IMX6ULLRM 32.4 IOMUXC_GPR_GPR1, GPR10; the OCRAM
// field and lock positions are OP-TEE's for the 6UL, imx_ocram.c
// IOMUXC_GPR10_*_6UL; each GPR10 lock bit is its field's bit + 16).
const (
	gpr1TZASC1BootLock = 1 << 23
	gpr9TZASC1Byp      = 1 << 0
	gpr10DbgEn         = 1 << 0
	gpr10DbgClkEn      = 1 << 1
	gpr10OCRAMTZEn     = 1 << 10
	gpr10OCRAMTZAddr   = 0x1f << 11 // 4 KiB units from OCRAM's start: 0, all of it
	gpr10LockDbgEn     = 1 << 16
	gpr10LockDbgClkEn  = 1 << 17
	gpr10LockOCRAMTZEn = 1 << 26
	gpr10LockOCRAMAddr = 0x1f << 27
)

// Config is what the partition depends on.
type Config struct {
	// NormalStart and NormalSize are the Normal World's memory: TZASC
	// region 1, Non-secure read/write. Everything else in DDR stays
	// region 0, Secure only.
	NormalStart, NormalSize uint32
	// Debug keeps JTAG (ARM invasive debug and its clock) on for
	// development; the default turns it off and locks it off.
	Debug bool
}

// GPR10 returns the value and the mask of the IOMUXC_GPR_GPR10 bits the
// partition sets: OCRAM all TrustZone-protected (OCRAM_TZ_EN, address 0),
// debug off unless debug, all of it locked.
func GPR10(debug bool) (val, mask uint32) {
	val = gpr10OCRAMTZEn | gpr10LockOCRAMTZEn | gpr10LockOCRAMAddr
	mask = gpr10OCRAMTZEn | gpr10OCRAMTZAddr | gpr10LockOCRAMTZEn | gpr10LockOCRAMAddr
	if !debug {
		val |= gpr10LockDbgEn | gpr10LockDbgClkEn
		mask |= gpr10DbgEn | gpr10DbgClkEn | gpr10LockDbgEn | gpr10LockDbgClkEn
	}
	return val, mask
}

// Apply programs the CSU, the TZASC and the IOMUXC GPR bits on b, in the
// order that leaves no window: values before their locks, the TZASC
// regions before its lockdown. It refuses (before writing anything) when
// the TZASC is bypassed (IOMUXC_GPR_GPR9 TZASC1_BYP clear: it must be set
// before DDR is used, by the boot image's DCD), since then no region is
// enforced at all.
func Apply(b Bus, c Config) error {
	if b.Read32(IOMUXC_GPR_GPR9)&gpr9TZASC1Byp == 0 {
		return fmt.Errorf("tzplan: the TZASC is bypassed (IOMUXC_GPR_GPR9 %#x): DDR is not partitioned", b.Read32(IOMUXC_GPR_GPR9))
	}
	attrs, err := TZASCRegion(c.NormalSize, spNormalRW)
	if err != nil {
		return err
	}
	if c.NormalStart%c.NormalSize != 0 {
		return fmt.Errorf("tzplan: Normal World region %#x+%#x not aligned to its size", c.NormalStart, c.NormalSize)
	}
	// TZASC: region 0 (all of DDR, no base or size) Secure only; region 1
	// the Normal World's; then lock the region registers, the lockdown
	// registers and (secure_boot_lock, GPR1) region 0.
	b.Write32(tzascRegionAttrs0, b.Read32(tzascRegionAttrs0)&^(0xf<<28)|spSecureRW<<28)
	b.Write32(tzascRegionLow0+0x10, c.NormalStart)
	b.Write32(tzascRegionHigh0+0x10, 0)
	b.Write32(tzascRegionAttrs0+0x10, attrs)
	b.Write32(TZASC_LOCKDOWN_RANGE, lockdownRange)
	b.Write32(TZASC_LOCKDOWN_SELECT, lockdownSelect)
	b.Write32(IOMUXC_GPR_GPR1, b.Read32(IOMUXC_GPR_GPR1)|gpr1TZASC1BootLock)
	// OCRAM TrustZone and debug: the fields, then their locks.
	val, mask := GPR10(c.Debug)
	const locks = 0xffff0000
	g := b.Read32(IOMUXC_GPR_GPR10)&^mask | val&^locks
	b.Write32(IOMUXC_GPR_GPR10, g)
	b.Write32(IOMUXC_GPR_GPR10, g|val&locks)
	// CSU: the levels, then the locks; the masters.
	for i, v := range CSL() {
		b.Write32(CSU_CSL0+4*uint32(i), v&^(cslLock0|cslLock1))
	}
	for i, v := range CSL() {
		b.Write32(CSU_CSL0+4*uint32(i), v)
	}
	sa := SA()
	b.Write32(CSU_SA, sa&0x55555555)
	b.Write32(CSU_SA, sa)
	// Read everything back: a lock an earlier boot stage set keeps a field
	// read-only until reset (IMX6ULLRM CSU chapter, CSU_CSLn and CSU_SA
	// lock bits), so a write can be lost without a word. The caller must
	// not start the Normal World on an error (a review found an OCOTP_CTRL
	// slot pre-locked open would have been reported as locked).
	want := []struct {
		name       string
		addr, mask uint32
		val        uint32
	}{
		{"TZASC region 1 low", tzascRegionLow0 + 0x10, 0xffffffff, c.NormalStart},
		{"TZASC region 1 attributes", tzascRegionAttrs0 + 0x10, 0xffffffff, attrs},
		{"TZASC region 0 attributes", tzascRegionAttrs0, 0xf << 28, spSecureRW << 28},
		{"TZASC lockdown range", TZASC_LOCKDOWN_RANGE, 0xffffffff, lockdownRange},
		{"TZASC lockdown select", TZASC_LOCKDOWN_SELECT, 0xffffffff, lockdownSelect},
		{"IOMUXC_GPR_GPR1 TZASC1 boot lock", IOMUXC_GPR_GPR1, gpr1TZASC1BootLock, gpr1TZASC1BootLock},
		{"IOMUXC_GPR_GPR10", IOMUXC_GPR_GPR10, mask, val},
		{"CSU_SA", CSU_SA, 0xffffffff, sa},
	}
	for i, v := range CSL() {
		want = append(want, struct {
			name       string
			addr, mask uint32
			val        uint32
		}{fmt.Sprintf("CSU_CSL%d", i), CSU_CSL0 + 4*uint32(i), 0xffffffff, v})
	}
	for _, w := range want {
		if got := b.Read32(w.addr); got&w.mask != w.val&w.mask {
			return fmt.Errorf("tzplan: %s (%#x) reads %#x after programming, want %#x under mask %#x: locked by an earlier boot stage?",
				w.name, w.addr, got, w.val, w.mask)
		}
	}
	return nil
}

// GIC (GICv2, ARM IHI 0048B) registers the partition sets.
const (
	GICD_IGROUPR   = GICBase + 0x1000 + 0x080
	GICD_ICENABLER = GICBase + 0x1000 + 0x180
	GICC_CTLR      = GICBase + 0x2000 + 0x000
	// GICC_CTLR (Secure copy, 4.4.1): EnableGrp0 bit 0, EnableGrp1 bit 1.
	GICCEnableGrp1 = 1 << 1
)

// Generic timer PPIs (Cortex-A7 MPCore TRM 8.2): the Secure physical
// timer is the Trusted OS's alarm, the Non-secure one the Normal World's.
const (
	PPISecurePhysTimer    = 29
	PPINonSecurePhysTimer = 30
)

// GICGroups returns the GICD_IGROUPRn values for lines registers (32
// interrupt IDs each): every interrupt Group 1 (Non-secure) but the
// Secure World's, which stay Group 0. A Normal World source the Normal
// World can assert (its physical timer, any peripheral it owns) made
// Group 0 interrupts the Secure World, and held asserted during a wait
// storms it (issue 32 item 4); as Group 1 it is the Normal World's, and
// the Secure World also stops its CPU interface signalling Group 1 while
// it runs (GICC_CTLR.EnableGrp1, see SecureGICCCTLR).
func GICGroups(lines int, secure ...int) []uint32 {
	g := make([]uint32, lines)
	for i := range g {
		g[i] = 0xffffffff
	}
	for _, id := range secure {
		if id >= 0 && id/32 < lines {
			g[id/32] &^= 1 << (id % 32)
		}
	}
	return g
}

// SecureGICCCTLR returns the CPU interface control the Secure World runs
// with, from the Normal World's: Group 1 (Non-secure) interrupts are not
// signalled to the core while the Secure World runs, so a Normal World
// source held asserted cannot interrupt it; the Normal World's value is
// put back before it runs again.
func SecureGICCCTLR(normal uint32) uint32 { return normal &^ GICCEnableGrp1 }

// SCR (ARMv7-A ARM B4.1.129): NS bit 0, IRQ 1, FIQ 2, EA 3, FW 4, AW 5,
// nET 6, SCD 7, HCE 8, SIF 9.
const (
	SCRNS  = 1 << 0
	SCRFIQ = 1 << 2
	SCREA  = 1 << 3
	SCRSIF = 1 << 9
	// SCRSecure is the Secure World's SCR: no instruction fetch from
	// Non-secure memory in Secure state, interrupts and aborts taken in
	// Secure state.
	SCRSecure = SCRSIF
	// SCRNormal is GoTEE's value for the Normal World (monitor/exec_arm.s:
	// NS, FIQs and external aborts to monitor mode).
	SCRNormal = SCRNS | SCRFIQ | SCREA
)
