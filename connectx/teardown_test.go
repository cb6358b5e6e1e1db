package connectx_test

import (
	"testing"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestCloseDestroysRootTable: Close destroys the NIC RX root flow table
// directly, as Linux does with the last table of the root (no
// SET_FLOW_TABLE_ROOT op_mod 1, which is for an IPoIB underlay QPN or a
// NIC TX root with reset_root_to_default, and which the model refuses on
// this Ethernet function): Close succeeds and leaves nothing behind.
func TestCloseDestroysRootTable(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := udp4(make([]byte, 100), true)
	if !m.Deliver(f) {
		t.Fatal("no steering to the RQ before Close")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := m.Stats(); st.CmdFailed != 0 {
		t.Errorf("%d commands failed", st.CmdFailed)
	}
	clean(t, m, mem)
}

// TestCreateTIRLength: CREATE_TIR carries exactly create_tir_in, 0x110
// bytes (a 0x20-byte header and the 0xF0-byte tirc of mlx5_ifc.h), as
// Linux sends it; the model reports any other length.
func TestCreateTIRLength(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	clean(t, m, mem)
}
