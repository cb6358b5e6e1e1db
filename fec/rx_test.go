package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

var nicMAC = [6]byte{0x02, 0, 0, 0, 0, 1}

func receiveOne(t *testing.T, r *fectest.Rig) (*fec.Packet, error) {
	t.Helper()
	return r.NIC.Receive()
}

func TestReceiveDeliversFramesWithAndWithoutCopybreak(t *testing.T) {
	for _, cb := range []int{-1, 0, 128, 256, 2048} {
		r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Copybreak = cb }})
		if cb == 0 {
			cb = fec.DefaultCopybreak
		}
		rng := rand.New(rand.NewPCG(7, uint64(cb+10)))
		var held []*fec.Packet
		for i := 0; i < 300; i++ {
			n := 60 + rng.IntN(1518-60+1)
			f := randomFrame(rng, n, nicMAC)
			if !r.Model.Deliver(f, fectest.RxOK) {
				t.Fatalf("copybreak %d frame %d: no descriptor", cb, i)
			}
			p, err := receiveOne(t, r)
			if err != nil || p == nil {
				t.Fatalf("copybreak %d frame %d: %v %v", cb, i, p, err)
			}
			if !bytes.Equal(p.Data, f) {
				t.Fatalf("copybreak %d frame %d: data differs", cb, i)
			}
			if n <= cb && cap(p.Data) > 2*max(n, 64) {
				t.Fatalf("copybreak %d: %d-byte frame in a %d-byte buffer: not right-sized", cb, n, cap(p.Data))
			}
			// Hold a few zero-copy packets for a while: the ring keeps running on spares.
			if i%5 == 0 && len(held) < 20 {
				held = append(held, p)
				continue
			}
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range held {
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
		st := r.NIC.Stats().Rx
		if st.Frames != 300 || st.Copybreak+st.ZeroCopy != 300 || st.Dropped() != 0 {
			t.Fatalf("copybreak %d: stats %+v", cb, st)
		}
		if cb < 60 && st.Copybreak != 0 || cb >= 1518 && st.ZeroCopy != 0 {
			t.Fatalf("copybreak %d: %d copied, %d zero-copy", cb, st.Copybreak, st.ZeroCopy)
		}
		if p, err := r.NIC.Receive(); p != nil || err != nil {
			t.Fatalf("empty ring returned %v %v", p, err)
		}
	}
}

func TestEveryRxErrorIsCountedAndDropped(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.MaxFrame = 1518 }})
	rng := rand.New(rand.NewPCG(8, 9))
	good := func() []byte { return randomFrame(rng, 100, nicMAC) }
	cases := []struct {
		name  string
		frame []byte
		fault fectest.RxFault
		kind  fec.RxErrorKind
	}{
		{"overrun", good(), fectest.RxOverrun, fec.RxOverrun},
		{"crc", good(), fectest.RxCRC, fec.RxCRC},
		{"non-octet", good(), fectest.RxNonOctet, fec.RxNonOctet},
		{"mac error", good(), fectest.RxMACError, fec.RxMACError},
		{"too long", randomFrame(rng, 1600, nicMAC), fectest.RxOK, fec.RxTruncated},
		{"runt", randomFrame(rng, 10, nicMAC), fectest.RxOK, fec.RxRunt},
	}
	for _, c := range cases {
		if !r.Model.Deliver(c.frame, c.fault) {
			t.Fatalf("%s: not delivered", c.name)
		}
		p, err := r.NIC.Receive()
		var fe *fec.FrameError
		if p != nil || !errors.As(err, &fe) || fe.Kind != c.kind {
			t.Fatalf("%s: got %v, %v; want a %v FrameError", c.name, p, err, c.kind)
		}
		// The ring keeps working after each.
		f := good()
		r.Model.Deliver(f, fectest.RxOK)
		if p, err := r.NIC.Receive(); err != nil || !bytes.Equal(p.Data, f) {
			t.Fatalf("%s: next frame: %v", c.name, err)
		} else {
			p.Release()
		}
	}
	st := r.NIC.Stats().Rx
	if st.Overrun != 1 || st.CRC != 1 || st.NonOctet != 1 || st.MACError != 1 || st.Truncated != 1 || st.Runt != 1 {
		t.Fatalf("counters %+v", st)
	}
	if st.Dropped() != uint64(len(cases)) || st.Frames != uint64(len(cases)) {
		t.Fatalf("dropped %d, received %d", st.Dropped(), st.Frames)
	}
}

func TestFrameSpanningBuffersIsDroppedAsOne(t *testing.T) {
	// An MRBR smaller than the frame makes the MAC chain buffers; the
	// driver counts one drop and resynchronises on L.
	r := fectest.NewRig(t, fectest.RigOptions{})
	r.Model.Write32(fec.ENETx_MRBR, 256)
	f := randomFrame(rand.New(rand.NewPCG(1, 1)), 700, nicMAC)
	r.Model.Deliver(f, fectest.RxOK)
	_, err := r.NIC.Receive()
	var fe *fec.FrameError
	if !errors.As(err, &fe) || fe.Kind != fec.RxMultiBuffer {
		t.Fatalf("got %v", err)
	}
	if st := r.NIC.Stats().Rx; st.MultiBuffer != 1 {
		t.Fatalf("MultiBuffer = %d", st.MultiBuffer)
	}
	if p, err := r.NIC.Receive(); p != nil || err != nil {
		t.Fatalf("ring not resynchronised: %v %v", p, err)
	}
}

func TestRxRunsOutOfSparesWithAClearError(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Copybreak = -1; c.RxSpare = 2; c.RxRing = 8 }})
	rng := rand.New(rand.NewPCG(2, 2))
	var held []*fec.Packet
	for i := 0; i < 2; i++ {
		r.Model.Deliver(randomFrame(rng, 500, nicMAC), fectest.RxOK)
		p, err := r.NIC.Receive()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	r.Model.Deliver(randomFrame(rng, 500, nicMAC), fectest.RxOK)
	if _, err := r.NIC.Receive(); !errors.Is(err, fec.ErrNoRxBuffer) {
		t.Fatalf("got %v, want ErrNoRxBuffer", err)
	}
	if st := r.NIC.Stats().Rx; st.NoBuffer != 1 {
		t.Fatalf("NoBuffer = %d", st.NoBuffer)
	}
	for _, p := range held {
		p.Release()
	}
	f := randomFrame(rng, 500, nicMAC)
	r.Model.Deliver(f, fectest.RxOK)
	if p, err := r.NIC.Receive(); err != nil || !bytes.Equal(p.Data, f) {
		t.Fatalf("after release: %v", err)
	}
	if err := held[0].Release(); !errors.Is(err, fec.ErrReleased) {
		t.Fatalf("double release: %v", err)
	}
	if st := r.NIC.Stats().Rx; st.DoubleRelease != 1 {
		t.Fatalf("DoubleRelease = %d", st.DoubleRelease)
	}
}

// While the ring is full the MAC keeps frames in its RX FIFO and writes
// them once the driver refills the ring and writes RDAR; only frames that
// overflow the FIFO are lost, counted in IEEE_R_MACERR and reported with OV
// on the next descriptor. (The old model dropped every frame at a full
// ring, so a driver that never rewrote RDAR looked as good as one that did.)
func TestFullRxRingHoldsFramesInTheFIFOAndReportsOverflow(t *testing.T) {
	const ring, held, lost = 4, 3, 2
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.RxRing = ring },
		Model: func(o *fectest.Options) { o.RxFIFO = held * (100 + 4 + 2) }})
	rng := rand.New(rand.NewPCG(4, 4))
	var sent [][]byte
	for i := 0; i < ring+held+lost; i++ {
		f := randomFrame(rng, 100, nicMAC)
		f[14] = byte(i)
		sent = append(sent, f)
		r.Model.Deliver(f, fectest.RxOK)
	}
	if s := r.Model.Stats(); s.RxFrames != ring || s.RxNoDescriptor != lost {
		t.Fatalf("model %+v", s)
	}
	if v := mib(r.NIC, "IEEE_R_MACERR"); v != lost {
		t.Fatalf("IEEE_R_MACERR = %d", v)
	}
	var got [][]byte
	overruns := 0
	for {
		p, err := r.NIC.Receive()
		var fe *fec.FrameError
		if errors.As(err, &fe) && fe.Kind == fec.RxOverrun {
			overruns++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			break
		}
		got = append(got, bytes.Clone(p.Data))
		p.Release()
	}
	if len(got) != ring+held || overruns != 1 {
		t.Fatalf("received %d frames and %d overruns, want %d and 1", len(got), overruns, ring+held)
	}
	for i, g := range got {
		if !bytes.Equal(g, sent[i]) {
			t.Fatalf("frame %d out of order or corrupted", i)
		}
	}
	// RDAR was rewritten on refill: frames flow again.
	if !r.Model.Deliver(randomFrame(rng, 100, nicMAC), fectest.RxOK) {
		t.Fatal("ring did not restart after refill")
	}
	if p, err := r.NIC.Receive(); p == nil || err != nil {
		t.Fatalf("after refill: %v %v", p, err)
	}
}

func mib(n *fec.NIC, name string) uint32 {
	for _, c := range n.MIB() {
		if c.Name == name {
			return c.Value
		}
	}
	panic(name)
}

// The copybreak compares the frame's length without FCS (Ethernet header
// included, SHIFT16 pad excluded): a frame of exactly the threshold is
// copied into a right-sized pooled buffer, one byte more is handed up in
// its ring buffer. docs/copybreak.md counts UDP datagrams against it as
// payload + 42.
func TestCopybreakThresholdIsFrameLength(t *testing.T) {
	for _, legacy := range []bool{false, true} { // SHIFT16 on; legacy descriptors, no SHIFT16
		for _, cb := range []int{128, 256, 512, 1024} {
			r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Copybreak, c.LegacyBD = cb, legacy }})
			rng := rand.New(rand.NewPCG(3, uint64(cb)))
			for _, n := range []int{cb, cb + 1} {
				f := randomFrame(rng, n, nicMAC)
				before := r.NIC.Stats().Rx
				if !r.Model.Deliver(f, fectest.RxOK) {
					t.Fatalf("legacy %v copybreak %d: %d-byte frame: no descriptor", legacy, cb, n)
				}
				p, err := receiveOne(t, r)
				if err != nil || p == nil {
					t.Fatalf("legacy %v copybreak %d: %d-byte frame: %v %v", legacy, cb, n, p, err)
				}
				if !bytes.Equal(p.Data, f) {
					t.Fatalf("legacy %v copybreak %d: %d-byte frame: data differs", legacy, cb, n)
				}
				st := r.NIC.Stats().Rx
				copied := st.Copybreak - before.Copybreak
				zero := st.ZeroCopy - before.ZeroCopy
				if n <= cb && (copied != 1 || zero != 0 || cap(p.Data) < n || cap(p.Data) >= 2*n) {
					t.Errorf("legacy %v copybreak %d: %d-byte frame: %d copied, %d zero-copy, in a %d-byte buffer; want copied into a right-sized one",
						legacy, cb, n, copied, zero, cap(p.Data))
				}
				if n > cb && (copied != 0 || zero != 1) {
					t.Errorf("legacy %v copybreak %d: %d-byte frame: %d copied, %d zero-copy; want zero-copy", legacy, cb, n, copied, zero)
				}
				if err := p.Release(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// A copied frame keeps the ring buffer's alignment: with SHIFT16 its IP
// header is 4-byte aligned whether it is copied or handed up zero-copy, at
// every length, the tops of the size classes (63-64, 127-128, 511-512,
// 1024) too: the class is chosen for the frame and its pad.
func TestCopybreakKeepsIPHeaderAligned(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Copybreak = 1024 }})
	rng := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{60, 62, 63, 64, 100, 126, 127, 128, 200, 500, 510, 511, 1000, 1024, 1025, 1514} {
		class := receiveAligned(t, r, randomFrame(rng, n, nicMAC))
		if n <= 1024 && class >= 2*max(n+2, 64) {
			t.Errorf("%d-byte frame: copied into a %d-byte buffer; want the size class of the frame and its pad", n, class)
		}
	}
}

// TestCopybreakLongestFrames tries to break the copy at its far end: the
// highest copybreak SetCopybreak takes (2048) with the longest frame the
// SoC accepts (Caps.MaxFrame, its SHIFT16 pad making it the largest a
// size class must hold), and lengths around the top class's start. Every
// frame arrives whole, aligned, in a buffer that holds it and its pad.
func TestCopybreakLongestFrames(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.MaxFrame = c.Caps.MaxFrame }})
	r.NIC.SetCopybreak(4096)
	if got := r.NIC.Copybreak(); got != 2048 {
		t.Fatalf("SetCopybreak(4096): %d, want the largest class, 2048", got)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{1022, 1023, 1024, 1025, 1514, 1518, r.NIC.MaxFrame() - 1, r.NIC.MaxFrame()} {
		receiveAligned(t, r, randomFrame(rng, n, nicMAC))
	}
}

// receiveAligned delivers f to r's NIC and receives it: whole, its IP
// header 4-byte aligned, in a buffer that holds it and the SHIFT16 pad
// before it (a buffer's start is 64-aligned, size classes and DMA buffers
// alike); it releases it and returns that buffer's size.
func receiveAligned(t *testing.T, r *fectest.Rig, f []byte) int {
	t.Helper()
	n := len(f)
	r.Model.Deliver(f, fectest.RxOK)
	p, err := receiveOne(t, r)
	if err != nil || p == nil {
		t.Fatalf("%d-byte frame: %v %v", n, p, err)
	}
	if !bytes.Equal(p.Data, f) {
		t.Fatalf("%d-byte frame: data differs", n)
	}
	class := cap(p.Data) + int(addrOf(p.Data)%64)
	if got := addrOf(p.Data[14:]) % 4; got != 0 {
		t.Errorf("%d-byte frame in a %d-byte buffer: IP header at %d mod 4", n, class, got)
	}
	if class < n+2 {
		t.Errorf("%d-byte frame in a %d-byte buffer: no room for the pad", n, class)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	return class
}
