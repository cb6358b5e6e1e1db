package tzplan

import (
	"fmt"
	"testing"
)

// OP-TEE's i.MX6UL CSU set-up (core/drivers/imx_csu.c): the CSL values it
// writes after granting everything (0x00FF00FF) and before locking every
// register, and its bus-master policy.
var (
	opteeCSL6UL = map[int]uint32{
		13: 0xFF0033, // ROMCP
		16: 0x3300FF, // TZASC
		39: 0x3300FF, // OCRAM
	}
	// Its i.MX6ULL table (csu_setting_imx6ull) adds the DCP.
	opteeCSL6ULL = map[int]uint32{
		13: 0xFF0033, // ROMCP
		16: 0x3300FF, // TZASC
		34: 0xFF0033, // DCP (slot 0; RNGB, slot 1, left open)
		39: 0x3300FF, // OCRAM
	}
	// OP-TEE's earlier table also made OCOTP_CTRL Normal World
	// read-only: {14, 0x3F00FF}.
	opteeOCOTP       = uint32(0x3F00FF)
	opteeSAAccess6UL = uint32(0x10554550) // "all masters non-secure except the Cortex-A7"
	opteeSALock6UL   = uint32(0x20aa8aa2)
	cslLevels        = uint32(0x00ff00ff)
	cslLocks         = uint32(cslLock0 | cslLock1)
	normalStart      = uint32(0x8000_0000)
	normalSize       = uint32(128 << 20)
	enet1IRQ         = 32 + 118 // ENET1 MAC line: SPI 118 (IMX6ULLRM 3.2 interrupt table)
	gicLines         = 5        // i.MX6UL: 128 SPIs + 32 private
)

// TestCSLMatchesOPTEE: every slot OP-TEE closes on the 6UL is closed the
// same way here, and its i.MX6ULL table's DCP (MMDC and the RNGB, which
// OP-TEE leaves open, are closed too), OCOTP_CTRL is read-only as in
// OP-TEE's earlier table, ENET is Secure-only, and every register is locked in both slots.
func TestCSLMatchesOPTEE(t *testing.T) {
	v := CSL()
	for _, table := range []map[int]uint32{opteeCSL6UL, opteeCSL6ULL} {
		for n, want := range table {
			for s := 0; s < 2; s++ {
				w := want >> (cslSlot1Shift * s) & 0xff
				if got := v[n] >> (cslSlot1Shift * s) & 0xff; w != CSLAll && got != w {
					t.Errorf("CSL%d slot %d level %#x, OP-TEE %#x", n, s, got, w)
				}
			}
		}
	}
	// The RNGB, which OP-TEE leaves open, is the Secure World's entropy
	// (the Normal World's comes through netcall.OpRandom).
	if got := v[34] >> cslSlot1Shift & 0xff; got != CSLSecure {
		t.Errorf("CSL34 slot 1 (RNGB) level %#x, want Secure only", got)
	}
	if v[14]&cslLevels != opteeOCOTP {
		t.Errorf("CSL14 (OCOTP_CTRL) levels %#08x, want %#08x (Normal World read-only: it must not burn fuses)", v[14]&cslLevels, opteeOCOTP)
	}
	if got := v[8] >> cslSlot1Shift & 0xff; got != CSLSecure {
		t.Errorf("CSL8 slot 1 (ENET) level %#x, want Secure only", got)
	}
	for n, r := range v {
		if r&cslLocks != cslLocks {
			t.Errorf("CSL%d = %#08x: not locked in both slots", n, r)
		}
	}
	closed := map[Slot]bool{}
	for _, c := range ClosedSlots() {
		closed[c.At] = true
	}
	for n, r := range v {
		for s := 0; s < 2; s++ {
			if lvl := r >> (cslSlot1Shift * s) & 0xff; !closed[Slot{n, s}] && lvl != CSLAll {
				t.Errorf("CSL%d slot %d level %#x but not listed as closed", n, s, lvl)
			}
		}
	}
}

// TestSAEveryMasterNonSecure: every bus master OP-TEE makes Non-secure on
// the 6UL is Non-secure here too except ENET, the CPU and ENET stay
// Secure, every OP-TEE lock is set and so is every other.
func TestSAEveryMasterNonSecure(t *testing.T) {
	sa := SA()
	for m := 0; m < NumMasters; m++ {
		ns := sa&(1<<(2*m)) != 0
		switch {
		case m == MasterCPU || m == MasterENET:
			if ns {
				t.Errorf("master %d Non-secure", m)
			}
		case opteeSAAccess6UL&(1<<(2*m)) != 0 && !ns:
			t.Errorf("master %d Secure; OP-TEE makes it Non-secure", m)
		case !ns:
			t.Errorf("master %d Secure (the Normal World may program it)", m)
		}
	}
	if sa&opteeSALock6UL != opteeSALock6UL {
		t.Errorf("SA %#08x lacks OP-TEE's locks %#08x", sa, opteeSALock6UL)
	}
	if sa&0xaaaaaaaa != 0xaaaaaaaa {
		t.Errorf("SA %#08x: not every master locked", sa)
	}
	if want := opteeSAAccess6UL&^(1<<(2*MasterENET)) | 0x55555555&^(1|1<<(2*MasterENET)); sa&0x55555555 != want {
		t.Errorf("SA access bits %#08x, want %#08x", sa&0x55555555, want)
	}
}

// TestApplyLeavesThePartition applies the partition to a model of the
// registers with the manuals' lock behaviour and checks what it leaves:
// the CSU, the TZASC regions and their lockdown, OCRAM's TrustZone bit,
// debug off, every lock; and that a second, hostile attempt to open
// things afterwards (what a Normal World would write) changes nothing.
func TestApplyLeavesThePartition(t *testing.T) {
	m := newSoC()
	if err := Apply(m, Config{NormalStart: normalStart, NormalSize: normalSize}); err != nil {
		t.Fatal(err)
	}
	if m.refused != 0 {
		t.Errorf("%d writes refused by a lock: a value written after its lock", m.refused)
	}
	want := CSL()
	for i := range want {
		if got := m.regs[CSU_CSL0+4*uint32(i)]; got != want[i] {
			t.Errorf("CSU_CSL%d = %#08x, want %#08x", i, got, want[i])
		}
	}
	if got := m.regs[CSU_SA]; got != SA() {
		t.Errorf("CSU_SA = %#08x, want %#08x", got, SA())
	}
	// TZASC: region 0 Secure read/write only, region 1 the Normal
	// World's 128 MiB (size field 26: 2^27 bytes) Non-secure read/write,
	// enabled; the lockdown and the boot lock set.
	if sp := m.regs[tzascRegionAttrs0] >> 28; sp != spSecureRW {
		t.Errorf("TZASC region 0 permissions %#b, want Secure read/write only", sp)
	}
	if lo, at := m.regs[tzascRegionLow0+0x10], m.regs[tzascRegionAttrs0+0x10]; lo != normalStart || at != spNormalRW<<28|26<<1|1 {
		t.Errorf("TZASC region 1 base %#x attributes %#08x", lo, at)
	}
	if m.regs[TZASC_LOCKDOWN_SELECT]&0b111 != 0b111 || m.regs[TZASC_LOCKDOWN_RANGE]&(1<<31) == 0 || m.regs[IOMUXC_GPR_GPR1]&gpr1TZASC1BootLock == 0 {
		t.Errorf("TZASC not locked: range %#x select %#x GPR1 %#x", m.regs[TZASC_LOCKDOWN_RANGE], m.regs[TZASC_LOCKDOWN_SELECT], m.regs[IOMUXC_GPR_GPR1])
	}
	g := m.regs[IOMUXC_GPR_GPR10]
	if g&gpr10OCRAMTZEn == 0 || g&gpr10OCRAMTZAddr != 0 || g&(gpr10LockOCRAMTZEn|gpr10LockOCRAMAddr) != gpr10LockOCRAMTZEn|gpr10LockOCRAMAddr {
		t.Errorf("GPR10 %#08x: OCRAM not all TrustZone-protected and locked", g)
	}
	if g&(gpr10DbgEn|gpr10DbgClkEn) != 0 || g&(gpr10LockDbgEn|gpr10LockDbgClkEn) != gpr10LockDbgEn|gpr10LockDbgClkEn {
		t.Errorf("GPR10 %#08x: debug not off and locked", g)
	}
	// A Normal World (were the CSU to let it write) opening everything.
	before := fmt.Sprint(m.regs)
	for i := uint32(0); i < NumCSL; i++ {
		m.Write32(CSU_CSL0+4*i, 0x00ff00ff)
	}
	m.Write32(CSU_SA, 0x55555555)
	m.Write32(tzascRegionAttrs0, 0xf<<28)
	m.Write32(tzascRegionAttrs0+0x10, 0xf<<28|31<<1|1)
	m.Write32(TZASC_LOCKDOWN_SELECT, 0)
	m.Write32(IOMUXC_GPR_GPR10, gpr10DbgEn|gpr10DbgClkEn)
	if after := fmt.Sprint(m.regs); after != before {
		t.Errorf("writes after the locks changed the partition:\nbefore %s\nafter  %s", before, after)
	}
}

// TestApplyDebugKeepsJTAG: the development build variable leaves debug
// alone (neither cleared nor locked) and still locks the rest.
func TestApplyDebugKeepsJTAG(t *testing.T) {
	m := newSoC()
	m.regs[IOMUXC_GPR_GPR10] = gpr10DbgEn | gpr10DbgClkEn
	if err := Apply(m, Config{NormalStart: normalStart, NormalSize: normalSize, Debug: true}); err != nil {
		t.Fatal(err)
	}
	if g := m.regs[IOMUXC_GPR_GPR10]; g&(gpr10DbgEn|gpr10DbgClkEn) != gpr10DbgEn|gpr10DbgClkEn || g&(gpr10LockDbgEn|gpr10LockDbgClkEn) != 0 {
		t.Errorf("GPR10 %#08x with Debug: debug changed or locked", g)
	}
	if m.regs[CSU_SA] != SA() {
		t.Errorf("CSU_SA %#08x with Debug", m.regs[CSU_SA])
	}
}

// TestApplyRefusesBypassedTZASC: with the TZASC bypassed nothing in DDR
// is enforced; Apply says so and writes nothing.
func TestApplyRefusesBypassedTZASC(t *testing.T) {
	m := newSoC()
	m.regs[IOMUXC_GPR_GPR9] = 0
	before := fmt.Sprint(m.regs)
	if err := Apply(m, Config{NormalStart: normalStart, NormalSize: normalSize}); err == nil {
		t.Fatal("Apply with the TZASC bypassed succeeded")
	}
	if fmt.Sprint(m.regs) != before {
		t.Error("Apply wrote registers before refusing")
	}
}

// TestGICGroups: the Normal World's interrupt sources, its physical
// timer (PPI 30) among them, are Group 1; the Secure World's (its timer,
// PPI 29, and ENET1's line) Group 0; the Secure World runs with Group 1
// signalling off.
func TestGICGroups(t *testing.T) {
	g := GICGroups(gicLines, PPISecurePhysTimer, enet1IRQ)
	group := func(id int) int { return int(g[id/32] >> (id % 32) & 1) }
	for id := 0; id < 32*gicLines; id++ {
		want := 1
		if id == PPISecurePhysTimer || id == enet1IRQ {
			want = 0
		}
		if group(id) != want {
			t.Errorf("interrupt %d in Group %d, want %d", id, group(id), want)
		}
	}
	if group(PPINonSecurePhysTimer) != 1 {
		t.Errorf("the Non-secure physical timer (PPI 30) is Group 0: a Normal World holding it asserted storms the Secure World")
	}
	if SecureGICCCTLR(0b11)&GICCEnableGrp1 != 0 || SecureGICCCTLR(0b11)&1 == 0 {
		t.Errorf("Secure GICC_CTLR %#x from 0b11: want Group 0 on, Group 1 off", SecureGICCCTLR(0b11))
	}
}

// TestSCR: the Secure World's SCR forbids Secure instruction fetch from
// Non-secure memory; the Normal World's is Non-secure.
func TestSCR(t *testing.T) {
	if SCRSecure&SCRSIF == 0 || SCRSecure&SCRNS != 0 {
		t.Errorf("Secure SCR %#x: want SIF, not NS", SCRSecure)
	}
	if SCRNormal&SCRNS == 0 {
		t.Errorf("Normal SCR %#x: NS clear", SCRNormal)
	}
}
