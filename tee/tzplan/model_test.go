package tzplan

// socModel is the registers Apply touches, with the lock behaviour the
// reference manuals give them, so that a value written after its lock, or
// a lock written before its value, shows up as a wrong final value.
type socModel struct {
	regs map[uint32]uint32
	// writes counts writes that a lock refused.
	refused int
}

func newSoC() *socModel {
	m := &socModel{regs: map[uint32]uint32{}}
	for i := uint32(0); i < NumCSL; i++ {
		// IMX6ULLRM 11.7.1.1: CSU_CSLn resets to 0x0033_0033 (both
		// slots Secure read/write only, unlocked).
		m.regs[CSU_CSL0+4*i] = 0x00330033
	}
	m.regs[CSU_SA] = 0 // IMX6ULLRM 11.7.1.4: reset 0, every master Secure
	// The boot image's DCD enabled the TZASC (TZC-380 not bypassed).
	m.regs[IOMUXC_GPR_GPR9] = gpr9TZASC1Byp
	return m
}

func (m *socModel) Read32(a uint32) uint32 { return m.regs[a] }

// keep returns which bits of register a a write may not change.
func (m *socModel) keep(a uint32) uint32 {
	old := m.regs[a]
	switch {
	case a >= CSU_CSL0 && a < CSU_CSL0+4*NumCSL:
		// IMX6ULLRM 11.7.1.1: a set lock bit makes its slot's level and
		// itself read-only until reset.
		var k uint32
		if old&cslLock0 != 0 {
			k |= 0xff | cslLock0
		}
		if old&cslLock1 != 0 {
			k |= 0xff<<cslSlot1Shift | cslLock1
		}
		return k
	case a == CSU_SA:
		// IMX6ULLRM 11.7.1.4: L_n locks NSA_n and itself.
		var k uint32
		for n := 0; n < NumMasters; n++ {
			if old&(1<<(2*n+1)) != 0 {
				k |= 3 << (2 * n)
			}
		}
		return k
	case a == IOMUXC_GPR_GPR10:
		// A set GPR10 lock bit (field bit + 16) makes its field and itself
		// read-only.
		var k uint32
		for bit := 16; bit < 32; bit++ {
			if old&(1<<bit) != 0 {
				k |= 1<<bit | 1<<(bit-16)
			}
		}
		return k
	case a == IOMUXC_GPR_GPR1:
		return old & gpr1TZASC1BootLock // set once, until reset
	case a >= tzascRegionLow0+0x10 && a < tzascRegionLow0+0x10*16:
		// TZC-380 3.3.3/3.3.4: regions in the locked range become
		// read-only once LOCKDOWN_SELECT locks the region registers.
		if m.regs[TZASC_LOCKDOWN_SELECT]&0b10 != 0 && m.regs[TZASC_LOCKDOWN_RANGE]&(1<<31) != 0 {
			return 0xffffffff
		}
	case a == tzascRegionAttrs0:
		// secure_boot_lock (GPR1 TZASC1_BOOT_LOCK) locks region 0.
		if m.regs[IOMUXC_GPR_GPR1]&gpr1TZASC1BootLock != 0 {
			return 0xffffffff
		}
	case a == TZASC_LOCKDOWN_RANGE || a == TZASC_LOCKDOWN_SELECT:
		if m.regs[TZASC_LOCKDOWN_SELECT]&0b1 != 0 {
			return 0xffffffff
		}
	}
	return 0
}

func (m *socModel) Write32(a, v uint32) {
	k := m.keep(a)
	if (v^m.regs[a])&k != 0 {
		m.refused++
	}
	m.regs[a] = m.regs[a]&k | v&^k
}
