package connectx_test

import (
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestRegisters: the dump reads the init segment as the card shows it
// (the model's firmware 14.32, command interface 5, the command queue the
// driver set, not initializing, a health counter that moves) and names
// every register once.
func TestRegisters(t *testing.T) {
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{})
	get := func() map[string]connectx.Register {
		m := map[string]connectx.Register{}
		for _, r := range rig.NIC.Registers() {
			if _, dup := m[r.Name]; dup {
				t.Fatalf("%s twice", r.Name)
			}
			m[r.Name] = r
		}
		return m
	}
	a, b := get(), get()
	if r := a["FW_REV"]; r.Offset != 0 || r.Value != 32<<16|14 {
		t.Errorf("FW_REV %+v, want 14.32", r)
	}
	if r := a["CMDIF_REV_FW_SUB"]; r.Value>>16 != connectx.CmdIfRev {
		t.Errorf("CMDIF_REV_FW_SUB %+v", r)
	}
	if r := a["INITIALIZING"]; r.Offset != 0x1FC || r.Value&connectx.InitBusy != 0 {
		t.Errorf("INITIALIZING %+v after bring-up", r)
	}
	if a["CMDQ_ADDR_L_SZ"].Value&^0xFFF == 0 {
		t.Errorf("CMDQ_ADDR_L_SZ %+v: no command queue", a["CMDQ_ADDR_L_SZ"])
	}
	if r := a["IRISC_SYND"]; r.Offset != 0x23C {
		t.Errorf("IRISC_SYND at %#x, want 0x23c (health buffer 0x200 + 0x3c)", r.Offset)
	}
	if r := a["HEALTH_COUNTER"]; r.Offset != 0x1010 || b["HEALTH_COUNTER"].Value == r.Value {
		t.Errorf("HEALTH_COUNTER %+v then %+v: want it at 0x1010, moving", r, b["HEALTH_COUNTER"])
	}
}
