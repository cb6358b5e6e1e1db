package fec_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// tap records frames a model puts on the wire.
type tap struct {
	mu     sync.Mutex
	frames [][]byte
}

func (t *tap) put(f []byte) {
	t.mu.Lock()
	t.frames = append(t.frames, f)
	t.mu.Unlock()
}

func (t *tap) take() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.frames
	t.frames = nil
	return f
}

func newTapRig(t testing.TB, o fectest.RigOptions) (*fectest.Rig, *tap) {
	r := fectest.NewRig(t, o)
	tp := &tap{}
	r.Model.SetPeer(tp.put)
	return r, tp
}

// randomFrame returns an Ethernet frame of n bytes addressed to dst.
func randomFrame(rng *rand.Rand, n int, dst [6]byte) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(rng.IntN(256))
	}
	copy(f, dst[:])
	if n >= 14 {
		f[12], f[13] = 0x88, 0xB5 // IEEE local experimental EtherType
	}
	return f
}

// scatter splits f into up to k fragments, each copied to a fresh backing
// array at a random offset so fragment alignment varies.
func scatter(rng *rand.Rand, f []byte, k int) [][]byte {
	cuts := []int{0, len(f)}
	for i := 1; i < k; i++ {
		cuts = append(cuts, rng.IntN(len(f)+1))
	}
	sortInts(cuts)
	var frags [][]byte
	for i := 0; i+1 < len(cuts); i++ {
		part := f[cuts[i]:cuts[i+1]]
		off := rng.IntN(64)
		backing := make([]byte, len(part)+off)
		frags = append(frags, backing[off:off+copy(backing[off:], part)])
	}
	return frags
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func padded(f []byte) []byte {
	if len(f) >= 60 {
		return f
	}
	return append(bytes.Clone(f), make([]byte, 60-len(f))...)
}

var strategies = []bounce.Strategy{bounce.Bounce, bounce.SG}

func TestWireBytesEqualFramesForEveryStrategyAndSoC(t *testing.T) {
	for _, soc := range fec.AllSoCs {
		caps, _ := fec.CapsFor(soc)
		for _, s := range strategies {
			t.Run(fmt.Sprintf("%s/%v", caps.Name, s), func(t *testing.T) {
				r, tp := newTapRig(t, fectest.RigOptions{SoC: soc, Config: func(c *fec.Config) {
					c.Strategy = s
					c.MaxFrame = caps.MaxFrame
				}})
				rng := rand.New(rand.NewPCG(uint64(soc), uint64(s)))
				for i := 0; i < 400; i++ {
					n := 14 + rng.IntN(caps.MaxFrame-14+1)
					if i%7 == 0 {
						n = 14 + rng.IntN(60) // short frames too
					}
					f := randomFrame(rng, n, [6]byte{2, 0, 0, 0, 0, 9})
					frags := scatter(rng, f, 1+rng.IntN(8))
					if err := r.NIC.Transmit(frags, fec.TxOptions{}, i); err != nil {
						t.Fatalf("frame %d (%d bytes, %d frags): %v", i, n, len(frags), err)
					}
					r.NIC.Reclaim()
					got := tp.take()
					if len(got) != 1 || !bytes.Equal(got[0], padded(f)) {
						t.Fatalf("frame %d (%d bytes in %d frags): wire differs\nwant %x\ngot  %x", i, n, len(frags), padded(f), got)
					}
				}
				done := r.Completions()
				if len(done) != 400 {
					t.Fatalf("%d completions, want 400", len(done))
				}
				for i, d := range done {
					if d.Cookie != i || d.Err != nil {
						t.Fatalf("completion %d = %+v", i, d)
					}
				}
				st := r.NIC.Stats().Tx
				if s == bounce.Bounce && st.Copied < st.Bytes {
					t.Fatalf("bounce copied %d of %d bytes", st.Copied, st.Bytes)
				}
				if s == bounce.SG && caps.TxAlign > 1 && st.Copied*4 > st.Bytes {
					t.Fatalf("sg copied %d of %d bytes: more than a quarter", st.Copied, st.Bytes)
				}
				if l := r.Mem.LiveMappings(); len(l) != 0 {
					t.Fatalf("mappings leaked: %v", l)
				}
			})
		}
	}
}

func TestShortFramesArePaddedWithZerosOnly(t *testing.T) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			r, tp := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Strategy = s; c.TxRing = 4; c.MaxTxDescs = 4 }})
			rng := rand.New(rand.NewPCG(1, 2))
			// Fill every slot and bounce buffer with non-zero bytes first.
			for i := 0; i < 8; i++ {
				f := bytes.Repeat([]byte{0xA5}, 1500)
				if err := r.NIC.Transmit(scatter(rng, f, 3), fec.TxOptions{}, nil); err != nil {
					t.Fatal(err)
				}
				r.NIC.Reclaim()
			}
			tp.take()
			for n := 14; n < 60; n++ {
				f := randomFrame(rng, n, [6]byte{2})
				if err := r.NIC.Transmit(scatter(rng, f, 2), fec.TxOptions{}, nil); err != nil {
					t.Fatal(err)
				}
				r.NIC.Reclaim()
				got := tp.take()
				if len(got) != 1 || len(got[0]) != 60 || !bytes.Equal(got[0][:n], f) {
					t.Fatalf("%d-byte frame: got %x", n, got)
				}
				if !bytes.Equal(got[0][n:], make([]byte, 60-n)) {
					t.Fatalf("%d-byte frame padded with stale bytes: %x", n, got[0][n:])
				}
			}
		})
	}
}

func TestRingWrapsOver100kFrames(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	r, tp := newTapRig(t, fectest.RigOptions{NoTrace: true, Config: func(c *fec.Config) { c.TxRing = 16; c.MaxTxDescs = 8 }})
	rng := rand.New(rand.NewPCG(3, 4))
	base := randomFrame(rng, 1514, [6]byte{2})
	frags := scatter(rng, base, 3)
	for i := 0; i < n; i++ {
		// Stamp the sequence number into the payload of the last fragment.
		last := frags[len(frags)-1]
		last[len(last)-4], last[len(last)-3], last[len(last)-2], last[len(last)-1] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		err := r.NIC.Transmit(frags, fec.TxOptions{}, nil)
		for errors.Is(err, fec.ErrRingFull) {
			r.NIC.Reclaim()
			err = r.NIC.Transmit(frags, fec.TxOptions{}, nil)
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if i%4 == 3 {
			r.NIC.Reclaim()
		}
		got := tp.take()
		if len(got) != 1 {
			t.Fatalf("frame %d: %d frames on the wire", i, len(got))
		}
		g := got[0]
		if seq := int(g[len(g)-4])<<24 | int(g[len(g)-3])<<16 | int(g[len(g)-2])<<8 | int(g[len(g)-1]); seq != i {
			t.Fatalf("frame %d carried sequence %d", i, seq)
		}
	}
	r.NIC.Reclaim()
	if st := r.NIC.Stats().Tx; st.Frames != uint64(n) || r.Model.Stats().TxFrames != n {
		t.Fatalf("driver sent %d, model saw %d, want %d", st.Frames, r.Model.Stats().TxFrames, n)
	}
	if free := r.NIC.TxFree(); free != 16 {
		t.Fatalf("%d descriptors free after draining, want 16", free)
	}
}

func TestFullRingAppliesBackPressureAndLosesNothing(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.TxRing = 8; c.MaxTxDescs = 4 }})
	// Stop the uDMA from completing anything: frames stay in flight.
	r.Model.SetFaults(fectest.Faults{TxStalled: true})
	rng := rand.New(rand.NewPCG(5, 6))
	var sent [][]byte
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		f := randomFrame(rng, 200, [6]byte{2})
		if err = r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, i); err == nil {
			sent = append(sent, f)
		}
	}
	if !errors.Is(err, fec.ErrRingFull) {
		t.Fatalf("want ErrRingFull, got %v", err)
	}
	if st := r.NIC.Stats().Tx; st.RingFull != 1 {
		t.Fatalf("RingFull counted %d", st.RingFull)
	}
	// Let the hardware run again: everything accepted goes out in order.
	r.Model.SetFaults(fectest.Faults{})
	for r.NIC.TxFree() < 8 {
		r.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
		r.NIC.Reclaim()
	}
	got := tp.take()
	if len(got) != len(sent) {
		t.Fatalf("%d frames on the wire, %d accepted", len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if d := r.Completions(); len(d) != len(sent) {
		t.Fatalf("%d completions for %d frames", len(d), len(sent))
	}
}

func TestTransmitRejectsBadFramesWithTypedErrors(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{})
	cases := []struct {
		frags [][]byte
		want  error
	}{
		{[][]byte{make([]byte, 13)}, fec.ErrFrameShort},
		{nil, fec.ErrFrameShort},
		{[][]byte{make([]byte, 1000), make([]byte, 519)}, fec.ErrFrameTooLong},
	}
	for _, c := range cases {
		if err := r.NIC.Transmit(c.frags, fec.TxOptions{}, nil); !errors.Is(err, c.want) {
			t.Errorf("got %v, want %v", err, c.want)
		}
	}
	st := r.NIC.Stats().Tx
	if st.TooShort != 2 || st.TooLong != 1 || st.Frames != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(tp.take()) != 0 {
		t.Fatal("a rejected frame reached the wire")
	}
	legacy, _ := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.LegacyBD = true }})
	if err := legacy.NIC.Transmit([][]byte{make([]byte, 100)}, fec.TxOptions{Csum: true}, nil); !errors.Is(err, fec.ErrNoCsum) {
		t.Fatalf("legacy descriptors with Csum: %v", err)
	}
}
