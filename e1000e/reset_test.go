package e1000e_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma/dmatest"
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

// resetRegs is a register file just rich enough for Init, Transmit and
// Watchdog: CTRL.RST self-clears, STATUS reads GIO master disabled,
// EECD.AUTO_RD reads set unless autoRDStuck, MDIC completes at once and
// reads the PHY registers in phy, and no descriptor is ever written back
// (frames stay in flight).
type resetRegs struct {
	mu          sync.Mutex
	regs        map[uint32]uint32
	phy         map[uint32]uint16
	autoRDStuck bool
	// paged: PHY registers 16-31 are paged through register 22
	// (BM_PHY_PAGE_SELECT), as Linux e1000e_read_phy_reg_bm2, the 82574's
	// PHY read (82571.c e1000_init_phy_params_82571), reaches them: it
	// writes the page to register 22 before any register above
	// MAX_PHY_MULTI_PAGE_REG (0xF). pagedPHY holds them by page<<5|reg.
	paged    bool
	page     uint32
	pagedPHY map[uint32]uint16
}

func (r *resetRegs) Read32(off uint32) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch off {
	case e1000e.CTRL:
		return r.regs[off] &^ (1 << 26)
	case e1000e.STATUS:
		return 1<<1 | 1
	case e1000e.EECD:
		if r.autoRDStuck {
			return 1 << 8
		}
		return 1<<8 | 1<<9
	}
	return r.regs[off]
}

func (r *resetRegs) Write32(off, v uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off == e1000e.MDIC {
		reg := v >> 16 & 31
		switch {
		case r.paged && v>>26&3 == 1 && reg == 22:
			r.page = v & 0xFFFF
		case r.paged && v>>26&3 == 2 && reg >= 16:
			v = v&^0xFFFF | uint32(r.pagedPHY[r.page<<5|reg])
		case v>>26&3 == 2:
			v = v&^0xFFFF | uint32(r.phy[reg])
		}
		v |= 1 << 28
	}
	r.regs[off] = v
}

// TestFailedResetCompletesFramesAndRestarts: a PHY-hang Reset whose NVM
// auto-read times out after CTRL.RST (ErrTimeout) still completes the
// frames in the TX ring with ErrReset (the reset controller owns none of
// them) and brings RX and TX back, as Linux's reset task does whatever
// the MAC reset returned: e1000e_down cleans the TX ring, e1000e_reset
// ignores reset_hw's result and runs init_hw, e1000e_up restarts RX and
// TX. Before the fix the frames were never completed and RCTL/TCTL stayed
// off while Watchdog went on returning nil.
func TestFailedResetCompletesFramesAndRestarts(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{NoTrace: true, CachedSize: 4 << 20})
	regs := &resetRegs{regs: map[uint32]uint32{}, phy: map[uint32]uint16{}}
	var mu sync.Mutex
	var done []error
	nic, err := e1000e.New(e1000e.Config{Regs: regs, Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, 1}, TxRing: 64, RxRing: 64,
		OnTxDone: func(_ any, err error) { mu.Lock(); done = append(done, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := nic.Init(); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 100)
	copy(frame, macB)
	for i := 0; i < 3; i++ {
		if err := nic.Transmit([][]byte{frame}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	regs.mu.Lock()
	regs.phy[e1000e.PHYRxErrCount], regs.phy[e1000e.PHY1000TStatus] = 0xFFFF, 0xFF
	regs.autoRDStuck = true
	regs.mu.Unlock()
	if err := nic.Watchdog(); err != nil {
		t.Fatal(err)
	}
	if err := nic.Watchdog(); !errors.Is(err, e1000e.ErrTimeout) {
		t.Fatalf("reset with the auto-read stuck: %v", err)
	}
	// The PHY reads healthy again (the CTRL.RST reset it) and the NVM
	// answers: the watchdog has nothing more to do.
	regs.mu.Lock()
	regs.phy[e1000e.PHYRxErrCount], regs.phy[e1000e.PHY1000TStatus] = 0, 0
	regs.autoRDStuck = false
	regs.mu.Unlock()
	for i := 0; i < 3; i++ {
		if err := nic.Watchdog(); err != nil {
			t.Fatalf("watchdog %d: %v", i, err)
		}
	}
	mu.Lock()
	n := len(done)
	for _, err := range done {
		if !errors.Is(err, e1000e.ErrReset) {
			t.Errorf("stranded frame completed with %v", err)
		}
	}
	mu.Unlock()
	if n != 3 || nic.TxInFlight() != 0 {
		t.Errorf("after a failed reset: %d of 3 frames completed, %d descriptors still in flight on a controller that was reset (owns none)",
			n, nic.TxInFlight())
	}
	regs.mu.Lock()
	rctl, tctl := regs.regs[e1000e.RCTL], regs.regs[e1000e.TCTL]
	regs.mu.Unlock()
	if rctl&2 == 0 || tctl&2 == 0 {
		t.Errorf("watchdog reports nothing while RCTL = %#x, TCTL = %#x: receiver/transmitter left off after the failed reset", rctl, tctl)
	}
}

// TestCloseDuringResetStaysClosed: the board runs Watchdog on its own
// goroutine, so Close can come while a PHY-hang Reset is under way. Close
// must not write its stop (IMC, RCTL = 0, TCTL) before the Reset's
// configure, which would enable RX, TX and interrupts again after it:
// Linux serialises the two (e1000e_close waits for __E1000_RESETTING to
// clear; e1000_reset_task does nothing once __E1000_DOWN is set). Close
// is given up to 200 ms to issue its writes while the Reset is held; with
// Close waiting for the Reset it issues none, and the test goes on.
func TestCloseDuringResetStaysClosed(t *testing.T) {
	var (
		armed   bool
		armedMu sync.Mutex
		inReset = make(chan struct{})
		release = make(chan struct{})
	)
	r := newRig(t, rigOptions{cfg: func(c *e1000e.Config) {
		inner := c.Delay
		c.Delay = func(d time.Duration) {
			armedMu.Lock()
			hit := armed && d == 10*time.Millisecond // resetHW's quiesce, locks held
			if hit {
				armed = false
			}
			armedMu.Unlock()
			if hit {
				close(inReset)
				<-release
			}
			inner(d)
		}
	}})
	r.model.HangPHY()
	if err := r.nic.Watchdog(); err != nil {
		t.Fatal(err)
	}
	armedMu.Lock()
	armed = true
	armedMu.Unlock()
	wdErr := make(chan error, 1)
	go func() { wdErr <- r.nic.Watchdog() }()
	<-inReset
	tlps := r.h.TLPs()
	closed := make(chan error, 1)
	go func() { closed <- r.nic.Close() }()
	for end := time.Now().Add(200 * time.Millisecond); r.h.TLPs() < tlps+3 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-wdErr; err != nil {
		t.Fatal(err)
	}
	if v := r.model.Read32(e1000e.RCTL); v&2 != 0 {
		t.Errorf("after Close returned, RCTL = %#x: the receiver is enabled (DMA into the driver's buffers after Close)", v)
	}
	if v := r.model.Read32(e1000e.TCTL); v&2 != 0 {
		t.Errorf("after Close returned, TCTL = %#x: the transmitter is enabled", v)
	}
	if v := r.model.Read32(e1000e.IMS); v != 0 {
		t.Errorf("after Close returned, IMS = %#x: interrupts unmasked", v)
	}
}

// TestPHYHangCheckSelectsPage0: the receive error counter, register 21,
// lies above MAX_PHY_MULTI_PAGE_REG (0xF), and Linux reads it for the
// 82574 through e1000e_read_phy_reg_bm2, which first writes the page (0)
// to BM_PHY_PAGE_SELECT, register 22. With another page left selected (by
// the NVM's PHY configuration or a boot loader) a PHY hung on page 0 must
// still be seen; before the fix register 21 of page 2 was read and the
// hang never found.
func TestPHYHangCheckSelectsPage0(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{NoTrace: true, CachedSize: 4 << 20})
	regs := &resetRegs{regs: map[uint32]uint32{}, phy: map[uint32]uint16{}, paged: true, pagedPHY: map[uint32]uint16{}}
	nic, err := e1000e.New(e1000e.Config{Regs: regs, Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, 1}, TxRing: 64, RxRing: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := nic.Init(); err != nil {
		t.Fatal(err)
	}
	regs.mu.Lock()
	regs.page = 2                                     // left selected
	regs.pagedPHY[0<<5|e1000e.PHYRxErrCount] = 0xFFFF // page 0: saturated
	regs.phy[e1000e.PHY1000TStatus] = 0xFF            // idle error count saturated
	regs.pagedPHY[2<<5|e1000e.PHYRxErrCount] = 0x0000 // another page's register 21
	regs.mu.Unlock()
	for i := 0; i < 2; i++ {
		if err := nic.Watchdog(); err != nil {
			t.Fatal(err)
		}
	}
	if st := nic.Stats(); st.PHYHangs != 1 {
		t.Errorf("a PHY hung on page 0 with page 2 selected: PHYHangs %d after two checks, want 1 (Linux selects page 0 first)", st.PHYHangs)
	}
}

// TestResetTakesBackDeviceWrittenBuffers: a frame the controller has
// written (DD set) but the driver has not received when Reset runs. The
// reset takes every RX buffer back from the device (SyncForCPU, as Linux's
// e1000_clean_rx_ring unmaps each in e1000e_down) before re-arming it
// (SyncForDevice); the frame is dropped and counted (Rx.ResetDropped).
// Before the fix rx.start re-armed the device-written buffer without
// taking it back, which the DMA model reports as a violation.
func TestResetTakesBackDeviceWrittenBuffers(t *testing.T) {
	r := newRig(t, rigOptions{})
	rx := make([]byte, 100)
	copy(rx, macA)
	if !r.model.Inject(rx) {
		t.Fatal("frame not accepted")
	}
	r.model.HangPHY()
	for i := 0; i < 2; i++ {
		if err := r.nic.Watchdog(); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.nic.Stats(); st.PHYHangs != 1 || st.Rx.ResetDropped != 1 {
		t.Fatalf("after the reset: PHYHangs %d, Rx.ResetDropped %d, want 1 and 1", st.PHYHangs, st.Rx.ResetDropped)
	}
	if f, err := r.nic.Receive(); f != nil || err != nil {
		t.Errorf("a frame written before the reset was received after it: %v %v", f, err)
	}
}
