package fec_test

import (
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// Review (rev-self): attacks on the PHY-loopback self-test.

// TestReviewPHYLoopHalfDuplexLink: on a half-duplex link (a partner
// without autonegotiation: parallel detection gives half duplex) the
// self-test loops at half duplex, so the MAC runs with RCR DRT set and
// receives nothing while it transmits, and a looped frame arrives while it
// still transmits (IEEE 802.3 22.2.4.1.2: RX_DV within 512 BT of TX_EN).
// Every frame is lost: a false FAIL at boot. IEEE 802.3 22.2.4.1.8 has the
// PHY in loopback ignore the duplex bit; Linux micrel.c
// ksz9031_set_loopback forces full duplex. The loop must run full duplex.
func TestReviewPHYLoopHalfDuplexLink(t *testing.T) {
	r, _ := phyRig(t, fectest.RigOptions{Model: func(o *fectest.Options) {
		o.PartnerForced = &fec.Link{Up: true, Speed: 100}
	}})
	if l := r.NIC.Link(); l.FullDuplex {
		t.Fatalf("link %v: want half duplex", l)
	}
	res, err := r.NIC.SelfTest(fec.SelfTestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if !x.OK() {
			t.Errorf("%s (model lost %d looped frames to DRT)", x, r.Model.Stats().LoopDropped)
		}
	}
}

// TestReviewPHYLoopRestoreMDIOError: MDIO failing (transiently) while the
// self-test has the PHY in loopback leaves the PHY in loopback for
// good: phyLooped is cleared, the link watch then reads BMSR link up (the
// loop's) and changes nothing, and the NIC is deaf to the wire forever
// with n.Link() up. The restore must be retried (e.g. by the watch while
// phyLooped stays set) until the PHY is out of loopback.
func TestReviewPHYLoopRestoreMDIOError(t *testing.T) {
	r, p := phyRig(t, fectest.RigOptions{})
	armed := false
	sleep := func(time.Duration) {
		// The first sleep is phyLoopOn's wait for BMSR link status, with
		// BMCR loopback already written: MDIO fails from here on (a bus
		// glitch mid-test), the wait's read fails and so does the
		// restore's write.
		if !armed {
			armed = true
			r.Model.SetFaults(fectest.Faults{MDIOStuck: true})
		}
	}
	_, err := r.NIC.SelfTest(fec.SelfTestOptions{Sleep: sleep})
	if !armed {
		t.Fatal("the fault was never armed (no sleep in the self-test)")
	}
	t.Logf("self-test error (expected): %v", err)
	r.Model.SetFaults(fectest.Faults{}) // the MDIO bus works again
	for i := 0; i < 50; i++ {
		p.PollLink()
	}
	bmcr, merr := r.NIC.MDIORead(p.Addr, fec.MII_BMCR)
	if merr != nil || bmcr&fec.BMCR_LOOPBACK != 0 {
		t.Errorf("BMCR %#04x (%v) after 50 link polls: PHY still in loopback, link %v", bmcr, merr, r.NIC.Link())
	}
	wire := make([]byte, 60)
	copy(wire, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x08, 0x06})
	if !r.Model.Deliver(wire, fectest.RxOK) {
		t.Error("the NIC takes no frame from the wire after the self-test")
	}
}

// TestReviewPHYLoopLinkAfterRestore: after the self-test the driver
// reports the link it had (restore re-applies it) while the PHY is
// renegotiating (autonegotiation restarted: on silicon 2-3 s for
// 100BASE-TX, more for 1000BASE-T), so the stack, started right after
// (DHCP's first DISCOVER), sends into a link that is down. The driver
// should report the link down until the watch sees it up.
func TestReviewPHYLoopLinkAfterRestore(t *testing.T) {
	r, _ := phyRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.ANReads = 20 }})
	if _, err := r.NIC.SelfTest(fec.SelfTestOptions{}); err != nil {
		t.Fatal(err)
	}
	if nl, pl := r.NIC.Link(), r.Model.PHYLink(); nl.Up && !pl.Up {
		t.Errorf("after the self-test the driver reports %v, the PHY has no link (renegotiating)", nl)
	}
}

// TestReviewPHYLoopWithoutPHY: SelfTest with Loopback LoopPHY on a NIC
// that has taken no PHY (PHYAddr -1) addresses PHY 31 (-1 & 0x1F): on a
// shared MDIO bus that is some other device's BMCR, written with loopback
// and restored from what it read. It must refuse with an error instead.
func TestReviewPHYLoopWithoutPHY(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	if a := r.NIC.PHYAddr(); a >= 0 {
		t.Fatalf("PHYAddr %d without StartLink", a)
	}
	res, err := r.NIC.SelfTest(fec.SelfTestOptions{Loopback: fec.LoopPHY, Timeout: 20 * time.Millisecond})
	if err == nil {
		t.Errorf("LoopPHY without a PHY ran: %v", res)
	}
}
