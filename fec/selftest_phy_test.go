package fec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// phyRig is a model rig whose PHY the driver has taken (StartLink), as on
// every board with a PHY: the self-test then loops at the PHY.
func phyRig(t *testing.T, o fectest.RigOptions) (*fectest.Rig, *fec.PHY) {
	t.Helper()
	r := fectest.NewRig(t, o)
	p, err := r.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}, Poll: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if l := r.NIC.Link(); !l.Up {
		t.Fatalf("link %v after StartLink", l)
	}
	return r, p
}

// TestSelfTestPHYLoopback: with a PHY taken, the self-test loops at the
// PHY (BMCR loopback, IEEE 802.3 22.2.4.1.2): the MAC keeps its RMII
// interface, every mode passes, a frame from the medium during the test
// is not received, the link watch polling meanwhile changes nothing and
// reports no error, and afterwards the PHY is out of loopback with
// autonegotiation on and the link comes back through the watch.
func TestSelfTestPHYLoopback(t *testing.T) {
	for _, soc := range []fec.SoC{fec.IMX6UL, fec.IMX6Q} {
		t.Run(soc.String(), func(t *testing.T) {
			r, p := phyRig(t, fectest.RigOptions{SoC: soc})
			l0 := r.NIC.Link()
			var polls int
			var pollBad []string
			wire := make([]byte, 60)
			copy(wire, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x08, 0x06})
			sleep := func(d time.Duration) {
				if polls == 0 && r.Model.Deliver(wire, fectest.RxOK) {
					pollBad = append(pollBad, "a frame from the medium was taken in PHY loopback")
				}
				polls++
				if l, changed, err := p.PollLink(); changed || err != nil {
					pollBad = append(pollBad, l.String()+" "+errString(err))
				}
			}
			res, err := r.NIC.SelfTest(fec.SelfTestOptions{Sleep: sleep})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range res {
				if !x.OK() || x.Loopback != "phy" || x.Foreign != 0 || !strings.HasSuffix(x.String(), "loop=phy") {
					t.Errorf("%s (foreign %d)", x, x.Foreign)
				}
			}
			if polls == 0 || len(pollBad) > 0 {
				t.Errorf("%d link polls during the self-test; wrong: %v", polls, pollBad)
			}
			bmcr, err := r.NIC.MDIORead(p.Addr, fec.MII_BMCR)
			if err != nil || bmcr&fec.BMCR_LOOPBACK != 0 || bmcr&fec.BMCR_ANENABLE == 0 {
				t.Fatalf("BMCR %#04x (%v) after the self-test: want loopback off, autonegotiation on", bmcr, err)
			}
			if st := r.Model.Stats(); st.LinkMismatch != 0 {
				t.Errorf("model: %d frames sent at a mode the looped PHY does not run", st.LinkMismatch)
			}
			// Autonegotiation restarted: the watch finds the link again.
			for i := 0; i < 50; i++ {
				p.PollLink()
			}
			if l := r.NIC.Link(); l != l0 {
				t.Errorf("link %v after the self-test and the watch, want %v", l, l0)
			}
			if !r.Model.Deliver(wire, fectest.RxOK) {
				t.Error("after the self-test the MAC does not take a frame from the medium")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSelfTestPHYLoopbackFindsFaults: in the PHY's loopback the seeded
// faults are found as in the MAC's, and a PHY that keeps its loopback bit
// but sends the frames on (QEMU 7.2's: imx_fec.c stores BMCR bits 0x7980
// and loops nothing) on a MAC that counts nothing reads unsupported.
func TestSelfTestPHYLoopbackFindsFaults(t *testing.T) {
	t.Run("wrong checksum verdict", func(t *testing.T) {
		r, _ := phyRig(t, fectest.RigOptions{})
		r.Model.SetFaults(fectest.Faults{WrongVerdict: 1})
		res, err := r.NIC.SelfTest(fec.SelfTestOptions{})
		if err != nil || res[0].OK() || !strings.Contains(res[0].First, "checksum") {
			t.Fatalf("bounce: %v %v, want the wrong verdict found", res, err)
		}
	})
	t.Run("dropped fragment", func(t *testing.T) {
		r, _ := phyRig(t, fectest.RigOptions{})
		r.Model.SetFaults(fectest.Faults{SkipFragment: 1})
		res, err := r.NIC.SelfTest(fec.SelfTestOptions{})
		if err != nil || res[1].OK() {
			t.Fatalf("sg: %v %v, want the lost fragment found", res, err)
		}
	})
	t.Run("unsupported", func(t *testing.T) {
		r, _ := phyRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.NoLoopback, o.NoMIB = true, true }})
		res, err := r.NIC.SelfTest(fec.SelfTestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range res {
			if !x.Unsupported || x.Loopback != "phy" {
				t.Errorf("%s: want unsupported", x)
			}
		}
	})
	t.Run("MAC loopback chosen", func(t *testing.T) {
		r, _ := phyRig(t, fectest.RigOptions{})
		res, err := r.NIC.SelfTest(fec.SelfTestOptions{Loopback: fec.LoopMAC})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range res {
			if !x.OK() || x.Loopback != "mac" {
				t.Errorf("%s: want a pass in the MAC's loopback", x)
			}
		}
	})
}
