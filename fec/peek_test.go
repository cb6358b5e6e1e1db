package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// TestPeekShowsAndDropNextDropsInPlace: Peek shows the waiting frames in
// order without taking them, DropNext drops the next one without a packet
// (counted apart from received frames), Receive then returns the rest in
// order, and the ring keeps running through many times its size of dropped
// frames (every buffer comes back to the uDMA; the model checks ownership).
func TestPeekShowsAndDropNextDropsInPlace(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.RxRing = 16 }})
	rng := rand.New(rand.NewPCG(3, 4))
	if _, _, st := r.NIC.Peek(0, 2000); st != fec.PeekNone {
		t.Fatalf("empty ring: Peek says %v", st)
	}
	if err := r.NIC.DropNext(); !errors.Is(err, fec.ErrNotPeekable) {
		t.Fatalf("empty ring: DropNext: %v", err)
	}
	received, dropped := 0, 0
	for round := 0; round < 40; round++ {
		var frames [][]byte
		for i := 0; i < 8; i++ {
			f := randomFrame(rng, 60+rng.IntN(200), nicMAC)
			if !r.Model.Deliver(f, fectest.RxOK) {
				t.Fatalf("round %d frame %d: no descriptor (a dropped buffer was not given back)", round, i)
			}
			frames = append(frames, f)
		}
		for k, f := range frames {
			b, _, st := r.NIC.Peek(k, 2000)
			if st != fec.PeekFrame || !bytes.Equal(b, f) {
				t.Fatalf("round %d: Peek(%d) = %v, %d bytes; want frame of %d", round, k, st, len(b), len(f))
			}
		}
		if _, _, st := r.NIC.Peek(len(frames), 2000); st != fec.PeekNone {
			t.Fatalf("round %d: Peek past the last frame says %v", round, st)
		}
		// PeekRun shows the same run under one lock.
		var run [][]byte
		show := func(k int, b []byte, _ fec.CsumInfo) {
			if k != len(run) {
				t.Fatalf("round %d: PeekRun showed frame %d after %d", round, k, len(run))
			}
			run = append(run, b)
		}
		if m, st := r.NIC.PeekRun(100, 2000, show); m != len(frames) || st != fec.PeekNone {
			t.Fatalf("round %d: PeekRun = %d, %v; want %d, PeekNone", round, m, st, len(frames))
		}
		for k, f := range frames {
			if !bytes.Equal(run[k], f) {
				t.Fatalf("round %d: PeekRun frame %d differs", round, k)
			}
		}
		run = run[:0]
		if m, st := r.NIC.PeekRun(3, 2000, show); m != 3 || st != fec.PeekFrame {
			t.Fatalf("round %d: PeekRun up to 3 = %d, %v", round, m, st)
		}
		run = run[:0]
		if m, st := r.NIC.PeekRun(100, len(frames[0])-1, show); m != 0 || st != fec.PeekFrame || len(run) != 0 {
			t.Fatalf("round %d: PeekRun below the first frame's length = %d, %v", round, m, st)
		}
		// A frame longer than max is reported but not shown.
		if b, _, st := r.NIC.Peek(0, len(frames[0])-1); st != fec.PeekFrame || b != nil {
			t.Fatalf("round %d: Peek below the frame's length: %v, %d bytes", round, st, len(b))
		}
		for k, f := range frames {
			if k%3 != 2 {
				if err := r.NIC.DropNext(); err != nil {
					t.Fatalf("round %d: DropNext: %v", round, err)
				}
				dropped++
				continue
			}
			p, err := r.NIC.Receive()
			if err != nil || p == nil || !bytes.Equal(p.Data, f) {
				t.Fatalf("round %d frame %d: Receive after drops: %v %v", round, k, p, err)
			}
			p.Release()
			received++
		}
	}
	st := r.NIC.Stats().Rx
	if st.Skipped != uint64(dropped) || st.Frames != uint64(received) || st.Dropped() != 0 {
		t.Fatalf("stats %+v; dropped %d, received %d", st, dropped, received)
	}
}

// TestPeekStopsAtFramesReceiveMustReport: a frame with an error is never
// shown and never dropped by DropNext; Receive reports and counts it as
// before, and the frames after it can be peeked again.
func TestPeekStopsAtFramesReceiveMustReport(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	rng := rand.New(rand.NewPCG(5, 6))
	good := randomFrame(rng, 100, nicMAC)
	r.Model.Deliver(good, fectest.RxOK)
	r.Model.Deliver(randomFrame(rng, 100, nicMAC), fectest.RxCRC)
	after := randomFrame(rng, 100, nicMAC)
	r.Model.Deliver(after, fectest.RxOK)
	if _, _, st := r.NIC.Peek(0, 2000); st != fec.PeekFrame {
		t.Fatalf("Peek(0) = %v", st)
	}
	if b, _, st := r.NIC.Peek(1, 2000); st != fec.PeekOther || b != nil {
		t.Fatalf("Peek of a CRC error = %v, %d bytes; want PeekOther", st, len(b))
	}
	var run [][]byte
	if m, st := r.NIC.PeekRun(10, 2000, func(_ int, b []byte, _ fec.CsumInfo) { run = append(run, b) }); m != 1 || st != fec.PeekOther || !bytes.Equal(run[0], good) {
		t.Fatalf("PeekRun before a CRC error = %d, %v", m, st)
	}
	if err := r.NIC.DropNext(); err != nil {
		t.Fatal(err)
	}
	if err := r.NIC.DropNext(); !errors.Is(err, fec.ErrNotPeekable) {
		t.Fatalf("DropNext of a CRC error: %v", err)
	}
	var fe *fec.FrameError
	if p, err := r.NIC.Receive(); p != nil || !errors.As(err, &fe) || fe.Kind != fec.RxCRC {
		t.Fatalf("Receive of the CRC error: %v %v", p, err)
	}
	if b, _, st := r.NIC.Peek(0, 2000); st != fec.PeekFrame || !bytes.Equal(b, after) {
		t.Fatalf("Peek after the error: %v", st)
	}
	if st := r.NIC.Stats().Rx; st.CRC != 1 || st.Skipped != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// rdarCount counts writes of RDAR.
type rdarCount struct {
	*fectest.Model
	n int
}

func (c *rdarCount) Write32(off, v uint32) {
	if off == fec.ENETx_RDAR {
		c.n++
	}
	c.Model.Write32(off, v)
}

// TestDropRunDropsShownFramesInOneGo: DropRun drops a run of frames PeekRun
// showed with one RDAR write; asked for more frames than were shown, it
// drops nothing and says so; frames received in between count as moved.
func TestDropRunDropsShownFramesInOneGo(t *testing.T) {
	var regs *rdarCount
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) {
		c.RxRing = 16
		regs = &rdarCount{Model: c.Regs.(*fectest.Model)}
		c.Regs = regs
	}})
	rng := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < 10; round++ {
		var frames [][]byte
		for i := 0; i < 10; i++ {
			f := randomFrame(rng, 60+rng.IntN(200), nicMAC)
			if !r.Model.Deliver(f, fectest.RxOK) {
				t.Fatalf("round %d frame %d: no descriptor (a dropped buffer was not given back)", round, i)
			}
			frames = append(frames, f)
		}
		if err := r.NIC.DropRun(1); !errors.Is(err, fec.ErrNotPeekable) {
			t.Fatalf("round %d: DropRun before any peek: %v", round, err)
		}
		if m, _ := r.NIC.PeekRun(100, 2000, func(int, []byte, fec.CsumInfo) {}); m != len(frames) {
			t.Fatalf("round %d: PeekRun showed %d", round, m)
		}
		if err := r.NIC.DropRun(len(frames) + 1); !errors.Is(err, fec.ErrNotPeekable) {
			t.Fatalf("round %d: DropRun past the shown run: %v", round, err)
		}
		if b, _, st := r.NIC.Peek(0, 2000); st != fec.PeekFrame || !bytes.Equal(b, frames[0]) {
			t.Fatalf("round %d: a failed DropRun dropped something", round)
		}
		kicks := regs.n
		if err := r.NIC.DropRun(4); err != nil {
			t.Fatalf("round %d: DropRun(4): %v", round, err)
		}
		if regs.n != kicks+1 {
			t.Fatalf("round %d: DropRun(4) wrote RDAR %d times", round, regs.n-kicks)
		}
		p, err := r.NIC.Receive()
		if err != nil || p == nil || !bytes.Equal(p.Data, frames[4]) {
			t.Fatalf("round %d: Receive after the run: %v %v", round, p, err)
		}
		p.Release()
		// Six frames were shown after the run; one was taken since.
		if err := r.NIC.DropRun(6); !errors.Is(err, fec.ErrNotPeekable) {
			t.Fatalf("round %d: DropRun of a taken frame: %v", round, err)
		}
		if err := r.NIC.DropRun(5); err != nil {
			t.Fatalf("round %d: DropRun(5): %v", round, err)
		}
		if p, err := r.NIC.Receive(); p != nil || err != nil {
			t.Fatalf("round %d: ring not empty after the drops: %v %v", round, p, err)
		}
		if err := r.NIC.DropRun(0); err != nil {
			t.Fatalf("DropRun(0): %v", err)
		}
	}
	if st := r.NIC.Stats().Rx; st.Skipped != 90 || st.Frames != 10 || st.Dropped() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDropAfterRestartDropsNothing: a restart (SetLink) between a peek and
// the drop rebuilds the ring; a frame that arrives after it was never
// looked at, and DropNext must not drop it in place of the one peeked.
func TestDropAfterRestartDropsNothing(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	rng := rand.New(rand.NewPCG(9, 10))
	r.Model.Deliver(randomFrame(rng, 100, nicMAC), fectest.RxOK)
	if _, _, st := r.NIC.Peek(0, 2000); st != fec.PeekFrame {
		t.Fatalf("Peek = %v", st)
	}
	if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 100, FullDuplex: true}); err != nil {
		t.Fatal(err)
	}
	fresh := randomFrame(rng, 120, nicMAC)
	if !r.Model.Deliver(fresh, fectest.RxOK) {
		t.Fatal("no descriptor after the restart")
	}
	if err := r.NIC.DropNext(); !errors.Is(err, fec.ErrNotPeekable) {
		t.Fatalf("DropNext after a restart: %v; want ErrNotPeekable", err)
	}
	p, err := r.NIC.Receive()
	if err != nil || p == nil || !bytes.Equal(p.Data, fresh) {
		t.Fatalf("the frame after the restart was lost: %v %v", p, err)
	}
	p.Release()
}
