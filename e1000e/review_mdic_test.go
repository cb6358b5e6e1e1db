package e1000e_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tamanic/tamanic/e1000e"
)

// TestReviewMDICNotSerialised: ReadPHY is one MDIC write and a poll of
// MDIC for READY and the data, with no lock. GET /debug/regs on NIC 2
// (firmware/mcimx7d e1000eControls.Registers) reads ten PHY registers
// from the HTTP goroutine while the board's Watchdog reads the PHY's
// receive error count and 1000BASE-T status (phyHung) every 2 s, and
// Reset writes BMCR, each from its own goroutine. Two transactions
// interleave: the second write to MDIC replaces the first, and the first
// reader takes the second's data for its register. Linux serialises every
// PHY access of the 82574 (e1000_get_hw_semaphore_82574's swflag_mutex,
// taken by phy.ops.acquire around e1000e_read_phy_reg_mdic). Here one
// goroutine reads PHYID1 (0x0141) while another reads PHYID2: a defect
// whenever PHYID1 reads anything else (a false PHY hang verdict, a
// wrong value in the dump).
func TestReviewMDICNotSerialised(t *testing.T) {
	r := newRig(t, rigOptions{})
	id1, err := r.nic.ReadPHY(e1000e.PHYID1)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := r.nic.ReadPHY(e1000e.PHYID2)
	if err != nil || id2 == id1 {
		t.Fatalf("PHYID2 %#x %v: need two registers that differ", id2, err)
	}
	// Up to n reads, stopping at the first wrong one.
	const n = 1 << 18
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			r.nic.ReadPHY(e1000e.PHYID2)
		}
	}()
	wrong, first, i := 0, uint16(0), 0
	for ; i < n && wrong == 0; i++ {
		if v, err := r.nic.ReadPHY(e1000e.PHYID1); err == nil && v != id1 {
			first = v
			wrong++
		}
	}
	stop.Store(true)
	wg.Wait()
	if wrong > 0 {
		t.Errorf("PHYID1 (%#x) read as another register's value %#x at read %d of %d: MDIC transactions interleaved", id1, first, i, n)
	}
}
