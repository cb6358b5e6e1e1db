package fec_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// TestReviewSelfTestStalledTXIsNotUnsupported: a transmitter that takes the
// TDAR kicks but sends nothing (Faults.TxStalled: the uDMA or the MII TX
// clock held off) leaves every frame in the TX ring; nothing comes back and
// RMON_T_PACKETS does not move, which is exactly the test's "unsupported"
// rule (selftest.go: got == 0 and no T_PACKETS). So on silicon, whose MIB
// works, a dead transmit path is reported "loopback unsupported here",
// Failures 0, and fwmain's report counts no failure. QEMU, the case the
// rule is for, does complete its TX descriptors (imx_fec_do_tx clears R
// and sends to the wire): only a NIC whose descriptors never came back
// looks like this. A defect (checklist class 5: "unsupported" is a verdict
// given for what was not checked).
func TestReviewSelfTestStalledTXIsNotUnsupported(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	r.Model.SetFaults(fectest.Faults{TxStalled: true})
	for _, res := range selfTest(t, r) {
		if res.Unsupported || res.Failures == 0 {
			t.Errorf("%s: TX never completed a descriptor (unsupported %v, failures %d): want a failure", res, res.Unsupported, res.Failures)
		}
	}
}

// TestReviewSelfTestLoopbackLeftOnAfterError: SetLoopback sets n.loop before
// the restart and SelfTest returns at once when that restart fails (here
// a MAC reset that does not complete once, ErrResetTimeout) without
// clearing it. The restart still writes RCR with LOOP (it goes through its
// steps, as Linux's does), and n.loop stays set: every later restart, a
// link change's SetLink included, puts the MAC back in loopback, and no
// frame from the wire is ever received again. SelfTest's doc promises the
// loopback is restored; fwmain goes on to start the stack on this NIC.
// A defect (the NIC is left in a bad state after an error).
func TestReviewSelfTestLoopbackLeftOnAfterError(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	r.Model.SetFaults(fectest.Faults{ResetStuck: true})
	_, err := r.NIC.SelfTest(fec.SelfTestOptions{})
	if !errors.Is(err, fec.ErrResetTimeout) {
		t.Fatalf("self-test error %v, want ErrResetTimeout", err)
	}
	// The reset works again; the link poll restarts the MAC for a new
	// link, as it would at the next link change.
	r.Model.SetFaults(fectest.Faults{})
	// (The link the model's PHY negotiated, 100 Mb/s full duplex: a MAC
	// set for another speed takes nothing from this wire either way.)
	if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 100, FullDuplex: true}); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x08, 0x06})
	if !r.Model.Deliver(frame, fectest.RxOK) {
		t.Fatalf("after a failed self-test and a later restart the MAC takes no frame from the wire: RCR %#x (LOOP %v)",
			r.Model.Read32(fec.ENETx_RCR), r.Model.Read32(fec.ENETx_RCR)&fec.RCR_LOOP != 0)
	}
}

// TestReviewLoopbackGigabitSpeedWithoutRGMII: on a gigabit link (SABRE
// Lite's i.MX6Q, RGMII, whose board code autonegotiates before fwmain runs
// the self-test) SetLoopback writes RCR = MII_MODE|LOOP with RGMII_EN clear
// but keeps ECR.SPEED (1000 Mb/s) from the link. 1000 Mb/s needs RGMII_EN
// (docs/enet-fec.md 6.3, from Linux fec_restart: SPEED_1000 sets ECR bit 5
// only beside RGMII), and the manual's LOOP is an MII loopback, which runs
// at 10/100. NXP's fsl_enet.c never writes this pair: LOOP only when the
// interface is not RMII, with RGMII_EN and ECR.SPEED as configured. The
// model's loopback rule checks RCR alone, so it loops these frames back
// (class 13: a rule more lenient than the manual). A defect: the
// self-test programs a mode the manual does not define.
func TestReviewLoopbackGigabitSpeedWithoutRGMII(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{SoC: fec.IMX6Q, Config: func(c *fec.Config) { c.Interface = fec.RGMII }})
	if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 1000, FullDuplex: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.NIC.SetLoopback(true); err != nil {
		t.Fatal(err)
	}
	ecr, rcr := r.Model.Read32(fec.ENETx_ECR), r.Model.Read32(fec.ENETx_RCR)
	if ecr&fec.ECR_SPEED != 0 && rcr&fec.RCR_RGMII_EN == 0 {
		t.Errorf("loopback: ECR %#x has SPEED (1000 Mb/s) with RCR %#x: MII (RGMII_EN clear) LOOP", ecr, rcr)
	}
}

// TestReviewSelfTestRestartMidTestMisreported: fwmain runs the self-test
// after the board's ENET hook, which has already started the link watch
// (board/internal/phylink.Start: PollLink every 500 ms, and a link that
// comes up at another speed or duplex restarts the MAC, aborting every
// frame in flight and emptying the RX ring). The self-test neither holds
// restarts off nor notices one (Stats().Restarts), so a link that comes
// up while it runs, as at boot when autonegotiation completes late, turns
// a healthy NIC's result into a wrong verdict: the aborted frames were
// never counted sent, so the mode reads "loopback unsupported here" on
// silicon whose loopback works (with a restart later in the wait, "N of M
// frames came back": a failure). Here the uDMA runs beside the CPU
// (AsyncTx, stepped from the test's Sleep) and the link poll's SetLink
// lands at the first wait. A defect (a healthy NIC not passed, and the
// mode silently tested nothing).
func TestReviewSelfTestRestartMidTestMisreported(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.AsyncTx = true }})
	linked := false
	sleep := func(time.Duration) {
		if !linked {
			linked = true
			// The link poll: the partner came up at 10 Mb/s full duplex.
			if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 10, FullDuplex: true}); err != nil {
				t.Error(err)
			}
		}
		for r.Model.StepTx() {
		}
	}
	res, err := r.NIC.SelfTest(fec.SelfTestOptions{Sleep: sleep, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		t.Logf("%s", x)
		if !x.OK() {
			t.Errorf("%s: a healthy NIC did not pass (a link change restarted the MAC during the test; restarts %d)", x, r.NIC.Stats().Restarts)
		}
	}
}
