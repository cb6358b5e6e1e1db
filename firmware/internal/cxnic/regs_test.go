package cxnic

import (
	"testing"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestRegisters: GET /debug/regs on the ConnectX answers its init
// segment (firmware 14.32 on the model, the health counter at 0x1010),
// and an interface without a card says so.
func TestRegisters(t *testing.T) {
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{})
	gs := registerGroups(rig.NIC)
	if len(gs) != 1 || gs[0].Block != "connectx" || gs[0].Error != "" {
		t.Fatalf("groups %+v", gs)
	}
	found := map[string]bool{}
	for _, r := range gs[0].Regs {
		found[r.Name] = true
		if r.Name == "FW_REV" && r.Value != 32<<16|14 {
			t.Errorf("FW_REV %#x", r.Value)
		}
		if r.Name == "HEALTH_COUNTER" && r.Offset != 0x1010 {
			t.Errorf("HEALTH_COUNTER at %#x", r.Offset)
		}
	}
	if !found["FW_REV"] || !found["HEALTH_COUNTER"] || !found["IRISC_SYND"] {
		t.Errorf("registers %+v", gs[0].Regs)
	}
	if gs := registerGroups(nil); len(gs) != 1 || gs[0].Error == "" {
		t.Errorf("no card: %+v", gs)
	}
}
