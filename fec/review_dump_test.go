package fec_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// TestReviewPHYDumpEatsLinkLatch: GET /debug/regs reads the PHY's
// registers (PHYRegisters), BMSR among them. BMSR's link status latches
// low until read (IEEE 802.3 22.2.4.2.13), and the driver's link poll
// relies on that latch to see a flap between two polls (PollLink's doc).
// A dump taken between a flap and the next poll clears it: the poll then
// sees "up, was up", does nothing, and when the partner came back at
// another speed or duplex the MAC stays programmed for the old one, so no
// frame crosses ("link up, no traffic") until the next flap. The dump is
// not free of side effects as dump.go says of the ENET registers; Linux's
// `ethtool -d` for the FEC reads no PHY register, and phylib's
// genphy_update_link keeps the latched-low reading for itself. A defect.
func TestReviewPHYDumpEatsLinkLatch(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.ANReads = 2 }})
	p, err := r.NIC.StartLink(fastLink)
	if err != nil {
		t.Fatal(err)
	}
	// The partner goes away and comes back at 10 Mb/s half duplex.
	r.Model.SetLink(false)
	r.Model.SetPartner(fec.ADV_10HALF, false, nil)
	r.Model.SetLink(true)
	// An operator looks at /debug/regs (the PHY part of it) a few times.
	for i := 0; i < 3; i++ {
		if _, err := r.NIC.PHYRegisters(p.Addr); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		if _, _, err := p.PollLink(); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	mac, phy := r.NIC.Link(), r.Model.PHYLink()
	if cross := exchange(t, r, tp, rng); mac != phy || !cross {
		st := r.Model.Stats()
		t.Fatalf("after a flap seen only by /debug/regs: MAC programmed for %v, PHY at %v; frames cross %v (model: %d link mismatches)", mac, phy, cross, st.LinkMismatch+st.DuplexMismatch)
	}
}
