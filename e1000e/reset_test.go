package e1000e_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/e1000e/e1000etest"
)

// Tests of the 82574's reset, its PHY-hang watchdog and what may run
// alongside a reset.

// TestResetWaitsForAutoRead: Init resets as e1000_reset_hw_82571 does
// (GIO master disabled first, EECD.AUTO_RD waited for, then 25 ms before
// the PHY and NVM); the model reports any access out of that order. An
// auto-read that never completes is a bounded error, with no MAC register
// touched after the reset.
func TestResetWaitsForAutoRead(t *testing.T) {
	r := newRig(t, rigOptions{noInit: true, model: e1000etest.Options{AutoReadDelay: 7 * time.Millisecond}})
	if err := r.nic.Init(); err != nil {
		t.Fatal(err)
	}
	if st := r.nic.Stats(); st.Resets != 1 || st.MasterTimeouts != 0 {
		t.Errorf("stats %+v", st)
	}
	r = newRig(t, rigOptions{noInit: true, model: e1000etest.Options{AutoReadNever: true}})
	if err := r.nic.Init(); !errors.Is(err, e1000e.ErrTimeout) || !strings.Contains(err.Error(), "auto-read") {
		t.Errorf("auto-read never done: %v", err)
	}
}

// TestPHYHangWatchdog: Linux checks the 82574's PHY every 2 s
// (FLAG2_CHECK_PHY_HANG, e1000_check_phy_82574) and resets the adapter when
// two checks in a row find it hung. The model's hung PHY passes no frames
// until a PHY reset. After the reset the frames the hang stranded in the
// TX ring are completed with ErrReset, the multicast filter is back, and
// frames flow both ways.
func TestPHYHangWatchdog(t *testing.T) {
	r := newRig(t, rigOptions{model: e1000etest.Options{ManualTX: true}})
	cp := capturing(r)
	group := [6]byte{0x01, 0x00, 0x5E, 0x00, 0x00, 0xFB}
	r.nic.AddMulticast(group)
	if err := r.nic.Watchdog(); err != nil || r.nic.Stats().PHYHangs != 0 {
		t.Fatalf("healthy PHY: %v %+v", err, r.nic.Stats())
	}
	frame := make([]byte, 100)
	copy(frame, macB)
	for i := 0; i < 3; i++ {
		if err := r.nic.Transmit([][]byte{frame}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	r.model.HangPHY()
	if err := r.nic.Watchdog(); err != nil || r.nic.Stats().PHYHangs != 0 || !r.model.PHYHung() {
		t.Fatalf("one hung reading reset the adapter: %v %+v", err, r.nic.Stats())
	}
	if err := r.nic.Watchdog(); err != nil {
		t.Fatal(err)
	}
	if st := r.nic.Stats(); st.PHYHangs != 1 || st.Resets != 2 || r.model.PHYHung() {
		t.Fatalf("after two hung readings: %+v, PHY hung %v", st, r.model.PHYHung())
	}
	done, errs := r.completions()
	if len(done) != 3 {
		t.Fatalf("stranded frames completed: %v", done)
	}
	for _, err := range errs {
		if !errors.Is(err, e1000e.ErrReset) {
			t.Errorf("stranded frame completed with %v", err)
		}
	}
	if r.nic.TxInFlight() != 0 {
		t.Errorf("%d descriptors in flight after the reset", r.nic.TxInFlight())
	}
	if err := r.nic.Transmit([][]byte{frame}, false, 9); err != nil {
		t.Fatal(err)
	}
	r.model.ProcessTX()
	r.nic.Poll()
	if f := cp.take(); len(f) != 1 || !bytes.Equal(f[0], frame) {
		t.Errorf("%d frames on the wire after the reset", len(f))
	}
	mc := append([]byte(nil), frame...)
	copy(mc, group[:])
	if !r.model.Inject(mc) {
		t.Fatal("multicast frame for the group filtered after the reset")
	}
	if f, err := r.nic.Receive(); err != nil || f == nil || !bytes.Equal(f.Bytes(), mc) {
		t.Fatalf("receive after the reset: %v %v", f, err)
	} else {
		f.Release()
	}
	if err := r.nic.Watchdog(); err != nil || r.nic.Stats().PHYHangs != 1 {
		t.Errorf("healthy again: %v %+v", err, r.nic.Stats())
	}
}

// A PCIe link that is gone is what the watchdog reports first.
func TestWatchdogSeesLinkLoss(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.h.DropLink()
	if err := r.nic.Watchdog(); !errors.Is(err, e1000e.ErrLinkDown) {
		t.Errorf("watchdog on a dead link: %v", err)
	}
	r.h.Take()
}

// Reset while Interrupt (a shared or spurious INTx line, an interrupt
// already being served) and HWStats (a /stats reader) run: they stay off
// the registers between CTRL.RST and the end of the reset, as the model's
// reset rules demand (Linux masks and synchronises its interrupt before
// its reset task resets).
func TestResetWhileInterrupting(t *testing.T) {
	// The reset's waits take real time too, so the other goroutine runs
	// while the reset is in progress.
	r := newRig(t, rigOptions{mode: e1000e.INTx, cfg: func(c *e1000e.Config) {
		sim := c.Delay
		c.Delay = func(d time.Duration) { sim(d); time.Sleep(d) }
	}})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.nic.Interrupt()
			r.nic.HWStats()
		}
	}()
	for i := 0; i < 5; i++ {
		if err := r.nic.Reset(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
	if st := r.nic.Stats(); st.Resets != 6 || st.Interrupts == 0 {
		t.Errorf("stats %+v", st)
	}
}
