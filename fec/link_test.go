package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

var fastLink = fec.LinkConfig{Addrs: []int{0, 1, 2, 3}, Poll: time.Microsecond}

// exchange sends one frame each way between r and a tap, and reports
// whether both crossed the PHY.
func exchange(t *testing.T, r *fectest.Rig, tp *tap, rng *rand.Rand) bool {
	t.Helper()
	tp.take()
	f := randomFrame(rng, 300, [6]byte{2})
	if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	r.NIC.Reclaim()
	got := tp.take()
	g := randomFrame(rng, 300, nicMAC)
	if !r.Model.Deliver(g, fectest.RxOK) {
		return false
	}
	p, err := r.NIC.Receive()
	if err != nil || p == nil || !bytes.Equal(p.Data, g) {
		t.Fatalf("RX: %v %v", p, err)
	}
	p.Release()
	return len(got) == 1 && bytes.Equal(got[0], f)
}

// After the board's bring-up the driver finds and resets the PHY,
// autonegotiates against the partner and programs the MAC for the result;
// frames then cross the PHY (the model drops frames whose MAC speed or
// duplex differ from the PHY's).
func TestStartLinkNegotiatesWithThePartner(t *testing.T) {
	full := func(s int) *fec.Link { return &fec.Link{Up: true, Speed: s, FullDuplex: true} }
	cases := []struct {
		name   string
		soc    fec.SoC
		iface  fec.Interface
		adv    uint16
		gbit   bool // partner and PHY do 1000BASE-T
		forced *fec.Link
		want   fec.Link
	}{
		{"autoneg 10/100", fec.IMX6UL, fec.RMII, 0x1E0, false, nil, fec.Link{Up: true, Speed: 100, FullDuplex: true}},
		{"autoneg 10 half only", fec.IMX6ULL, fec.RMII, fec.ADV_10HALF, false, nil, fec.Link{Up: true, Speed: 10}},
		{"partner forced 100 full: parallel detection", fec.IMX6UL, fec.RMII, 0, false, full(100), fec.Link{Up: true, Speed: 100}},
		{"partner forced 10 full: parallel detection", fec.IMX6UL, fec.RMII, 0, false, full(10), fec.Link{Up: true, Speed: 10}},
		{"gigabit i.MX6Q RGMII", fec.IMX6Q, fec.RGMII, 0x1E0, true, nil, fec.Link{Up: true, Speed: 1000, FullDuplex: true}},
		{"gigabit i.MX7D RGMII", fec.IMX7D, fec.RGMII, 0x1E0, true, nil, fec.Link{Up: true, Speed: 1000, FullDuplex: true}},
		{"gigabit i.MX6SX RGMII", fec.IMX6SX, fec.RGMII, 0x1E0, true, nil, fec.Link{Up: true, Speed: 1000, FullDuplex: true}},
		{"gigabit PHY on a 10/100 MAC", fec.IMX6UL, fec.RMII, 0x1E0, true, nil, fec.Link{Up: true, Speed: 100, FullDuplex: true}},
		{"gigabit PHY over RMII", fec.IMX6Q, fec.RMII, 0x1E0, true, nil, fec.Link{Up: true, Speed: 100, FullDuplex: true}},
	}
	for _, c := range cases {
		r, tp := newTapRig(t, fectest.RigOptions{SoC: c.soc, Config: func(cf *fec.Config) { cf.Interface = c.iface },
			Model: func(o *fectest.Options) {
				o.PartnerAdv, o.PartnerGbit, o.PHYGbit, o.PartnerForced, o.ANReads = c.adv|1, c.gbit, c.gbit, c.forced, 3
			}})
		// The board forced the PHY to 100 Mb/s full duplex, autonegotiation
		// off (TamaGo's bring-up).
		if err := r.NIC.MDIOWrite(2, fec.MII_BMCR, fec.BMCR_SPEED100|fec.BMCR_FULLDPLX); err != nil {
			t.Fatal(err)
		}
		p, err := r.NIC.StartLink(fastLink)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if l := r.NIC.Link(); l != c.want || r.Model.PHYLink() != c.want {
			t.Fatalf("%s: MAC %v, PHY %v, want %v", c.name, l, r.Model.PHYLink(), c.want)
		}
		rcr, ecr, tcr := r.Model.Read32(fec.ENETx_RCR), r.Model.Read32(fec.ENETx_ECR), r.Model.Read32(fec.ENETx_TCR)
		if (rcr&fec.RCR_RMII_10T != 0) != (c.want.Speed == 10) || (ecr&fec.ECR_SPEED != 0) != (c.want.Speed == 1000) ||
			(tcr&fec.TCR_FDEN != 0) != c.want.FullDuplex || (rcr&fec.RCR_DRT != 0) == c.want.FullDuplex {
			t.Fatalf("%s: %v programmed as RCR %#x ECR %#x TCR %#x", c.name, c.want, rcr, ecr, tcr)
		}
		rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
		if !exchange(t, r, tp, rng) {
			t.Fatalf("%s: frames do not cross the PHY: model %+v", c.name, r.Model.Stats())
		}
		if _, changed, err := p.PollLink(); changed || err != nil {
			t.Fatalf("%s: a quiet link polled as changed (%v)", c.name, err)
		}
		if st := r.Model.Stats(); st.LinkMismatch != 0 || (c.forced == nil && st.DuplexMismatch != 0) {
			t.Fatalf("%s: model %+v", c.name, st)
		}
		if st := r.NIC.Stats(); st.LinkUps != 1 || st.LinkDowns != 0 || st.Link != c.want {
			t.Fatalf("%s: stats %+v", c.name, st)
		}
	}
}

// What the old bring-up left: the PHY forced to 100 Mb/s full duplex
// against an autonegotiating partner, which then runs half duplex (parallel
// detection): a duplex mismatch. StartLink removes it.
func TestForcedPHYAgainstAnAutonegotiatingPartnerIsADuplexMismatch(t *testing.T) {
	for _, start := range []bool{false, true} {
		r, tp := newTapRig(t, fectest.RigOptions{})
		r.NIC.MDIOWrite(2, fec.MII_BMCR, fec.BMCR_SPEED100|fec.BMCR_FULLDPLX)
		if start {
			if _, err := r.NIC.StartLink(fastLink); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(2, 2))
		if !exchange(t, r, tp, rng) {
			t.Fatalf("start=%v: no traffic", start)
		}
		if mm := r.Model.Stats().DuplexMismatch; (mm != 0) != !start {
			t.Fatalf("start=%v: %d frames with a duplex mismatch", start, mm)
		}
	}
}

// The link drops and comes back (a flap), and comes back at another mode:
// PollLink follows each change, reprograms the MAC when the mode changes
// and counts the flaps.
func TestPollLinkFollowsFlapsAndModeChanges(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.ANReads = 2 }})
	p, err := r.NIC.StartLink(fastLink)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	poll := func() (fec.Link, bool) {
		l, ch, err := p.PollLink()
		if err != nil {
			t.Fatal(err)
		}
		return l, ch
	}
	// A flap shorter than the poll interval is still seen: BMSR latches.
	r.Model.SetLink(false)
	r.Model.SetLink(true)
	for i := 0; i < 5; i++ { // autonegotiation takes a few BMSR reads
		poll()
	}
	if st := r.NIC.Stats(); st.LinkDowns != 1 || st.LinkUps != 2 || !st.Link.Up || st.Restarts != 1 {
		t.Fatalf("after a short flap: %+v", st)
	}
	// Down: frames are lost on the wire; the MAC keeps completing them.
	r.Model.SetLink(false)
	if l, ch := poll(); l.Up || !ch {
		t.Fatalf("link loss not seen: %v %v", l, ch)
	}
	if exchange(t, r, tp, rng) {
		t.Fatal("frames crossed a PHY without link")
	}
	// Back at 10 Mb/s half duplex: the MAC is restarted for it.
	r.Model.SetPartner(fec.ADV_10HALF, false, nil)
	r.Model.SetLink(true)
	var l fec.Link
	for i := 0; i < 5 && !l.Up; i++ {
		l, _ = poll()
	}
	if want := (fec.Link{Up: true, Speed: 10}); l != want || r.NIC.Link() != want {
		t.Fatalf("link %v, want %v", l, want)
	}
	if !exchange(t, r, tp, rng) {
		t.Fatalf("no traffic at 10 Mb/s half duplex: model %+v", r.Model.Stats())
	}
	if st := r.NIC.Stats(); st.LinkDowns != 2 || st.LinkUps != 3 || st.Restarts != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A driver that never reprograms the MAC loses every frame.
	r.Model.SetLink(false)
	r.Model.SetPartner(0x1E0, false, nil)
	r.Model.SetLink(true)
	for i := 0; i < 5; i++ {
		r.NIC.MDIORead(2, fec.MII_BMSR) // AN completes; nobody polls
	}
	if exchange(t, r, tp, rng) || r.Model.Stats().LinkMismatch == 0 {
		t.Fatal("a MAC left at 10 Mb/s half duplex on a 100 Mb/s full duplex link passed frames")
	}
}

// WatchLink polls on its own until stopped.
func TestWatchLinkPolls(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	p, err := r.NIC.StartLink(fastLink)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { p.WatchLink(time.Millisecond, stop); close(done) }()
	r.Model.SetLink(false)
	for r.NIC.Link().Up {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	if r.NIC.Stats().LinkDowns != 1 {
		t.Fatal("flap not counted")
	}
}

// No PHY, a PHY without a partner, a partner with nothing in common.
func TestStartLinkEdgeCases(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	if _, err := r.NIC.StartLink(fec.LinkConfig{Addrs: []int{7}}); !errors.Is(err, fec.ErrNoPHY) {
		t.Fatal("no PHY at 7, yet StartLink succeeded")
	}
	r = fectest.NewRig(t, fectest.RigOptions{})
	r.Model.SetLink(false)
	p, err := r.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}, ANTimeout: 5 * time.Millisecond, Poll: time.Millisecond})
	if err != nil || r.NIC.Link().Up {
		t.Fatalf("no partner: %v, link %v", err, r.NIC.Link())
	}
	r.Model.SetLink(true)
	var l fec.Link
	for i := 0; i < 5 && !l.Up; i++ {
		l, _, _ = p.PollLink()
	}
	if !l.Up {
		t.Fatal("link never came up")
	}
	called := false
	r = fectest.NewRig(t, fectest.RigOptions{})
	if _, err := r.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}, AfterReset: func(p *fec.PHY) error {
		called = true
		return p.NIC.MDIOWrite(p.Addr, 0x1F, 0x80) // KSZ8081 RMII 50 MHz clock mode
	}}); err != nil || !called {
		t.Fatalf("AfterReset: %v %v", called, err)
	}
	if v, _ := r.NIC.MDIORead(2, 0x1F); v != 0x80 {
		t.Fatalf("vendor register %#x", v)
	}
}

// TestAbortedFramesReportedWithoutLocks: frames a restart aborts (a link
// change reprograms the MAC, as does SetLink) are reported to OnTxDone
// after the driver's locks are released, as Config.OnTxDone promises: a
// callback that asks the NIC for its link or statistics must not
// deadlock (it did while ctl was held across the restart).
func TestAbortedFramesReportedWithoutLocks(t *testing.T) {
	var nic *fec.NIC
	var aborted atomic.Int64
	r := fectest.NewRig(t, fectest.RigOptions{
		Model: func(o *fectest.Options) { o.AsyncTx = true }, // the uDMA never takes the frames
		Config: func(c *fec.Config) {
			c.OnTxDone = func(_ any, err error) {
				_ = nic.Link()
				_ = nic.Stats()
				if errors.Is(err, fec.ErrAborted) {
					aborted.Add(1)
				}
			}
		}})
	nic = r.NIC
	f := make([]byte, 100)
	f[0] = 2
	copy(f[6:], []byte{2, 0, 0, 0, 0, 1})
	f[12], f[13] = 0x88, 0xB5
	for i := 0; i < 3; i++ {
		if err := nic.Transmit([][]byte{f}, fec.TxOptions{}, i); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- nic.SetLink(fec.Link{Up: true, Speed: 10, FullDuplex: true}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetLink did not return: OnTxDone ran with a driver lock held and deadlocked")
	}
	if got := aborted.Load(); got != 3 {
		t.Fatalf("%d frames reported aborted, want 3", got)
	}
}
