package tzplan

import "testing"

// TestApplyReadsBackWhatItLocked (found by a review of issue 32, checklist
// classes 5 and 11): a CSL slot, CSU_SA or the TZASC may already be locked
// by an earlier boot stage (IMX6ULLRM 11.7.1.1/11.7.1.4: a set lock bit
// makes the field read-only until reset; TZC-380 lockdown likewise). Apply
// writes its values and returns nil without reading them back, and the
// Trusted OS then prints "CSU and TZASC programmed and locked" and starts
// the Normal World. Here an earlier stage left OCOTP_CTRL (CSL14) and the
// masters open and locked: Apply must fail.
func TestApplyReadsBackWhatItLocked(t *testing.T) {
	m := newSoC()
	m.regs[CSU_CSL0+4*14] = 0x00ff00ff | cslLock0 | cslLock1       // OCOTP_CTRL open, locked
	m.regs[CSU_SA] = 0x2 | 1<<(2*MasterENET) | 1<<(2*MasterENET+1) // ENET master Non-secure, locked
	err := Apply(m, Config{NormalStart: normalStart, NormalSize: normalSize})
	if got := m.regs[CSU_CSL0+4*14]; got != CSL()[14] && err == nil {
		t.Errorf("CSU_CSL14 left %#08x (want %#08x) and Apply returned nil: the partition is reported programmed and locked", got, CSL()[14])
	}
	if got := m.regs[CSU_SA]; got != SA() && err == nil {
		t.Errorf("CSU_SA left %#08x (want %#08x) and Apply returned nil", got, SA())
	}
}
