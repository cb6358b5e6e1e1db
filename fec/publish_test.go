package fec_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/tso"
)

// publishWatch checks, at every Barrier and at every TDAR write, the
// stores made since the previous Barrier (stores between two barriers may
// reach memory in any order on silicon): if the descriptor the uDMA stops
// at (front) became ready among them, none of the ready descriptors after
// it may have changed too, or the uDMA could act on a segment whose other
// words are still in the write buffer.
type publishWatch struct {
	*dmatest.Memory
	t      *testing.T
	ring   func() []byte
	size   int
	n      int
	front  int
	snap   []byte
	checks int
	bad    int
}

func (w *publishWatch) ready(b []byte, i int) bool {
	return fec.TxStatus(binary.LittleEndian.Uint32(b[i*w.size:])>>16)&fec.TX_R != 0
}

func (w *publishWatch) check() {
	if w.ring == nil || w.snap == nil {
		return
	}
	cur := w.ring()
	f := w.front
	if w.ready(w.snap, f) || !w.ready(cur, f) {
		return
	}
	w.checks++
	for k, i := 1, (f+1)%w.n; k < w.n && w.ready(cur, i); k, i = k+1, (i+1)%w.n {
		if !bytes.Equal(cur[i*w.size:(i+1)*w.size], w.snap[i*w.size:(i+1)*w.size]) {
			w.bad++
			w.t.Logf("descriptor %d changed in the interval in which %d, where the uDMA stops, became ready", i, f)
			return
		}
	}
}

func (w *publishWatch) Barrier() {
	w.check()
	w.Memory.Barrier()
	if w.ring != nil {
		w.snap = append(w.snap[:0], w.ring()...)
	}
}

type publishDoorbell struct {
	*fectest.Model
	w *publishWatch
}

func (d *publishDoorbell) Write32(off, v uint32) {
	if off == fec.ENETx_TDAR {
		d.w.check()
	}
	d.Model.Write32(off, v)
}

// TestTxFrontDescriptorPublishedAlone: a frame or GSO packet becomes
// visible to the uDMA through its first descriptor only, after a barrier
// that orders every other store of it (the GSO path holds that descriptor
// back until all segments are written and publishes it after one barrier).
// Fails if publishHeld's barrier is removed, or if post's per-frame
// barrier is.
func TestTxFrontDescriptorPublishedAlone(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		mem := dmatest.New(t, dmatest.Options{})
		caps, _ := fec.CapsFor(fec.IMX6UL)
		model := fectest.New(fectest.Options{Caps: caps, Mem: mem})
		const ring = 64
		size := fec.EnhancedDescSize
		if legacy {
			size = fec.LegacyDescSize
		}
		w := &publishWatch{Memory: mem, t: t, size: size, n: ring}
		n, err := fec.New(fec.Config{Regs: &publishDoorbell{Model: model, w: w}, Mem: w, Caps: caps, MAC: nicMAC, Strategy: bounce.SG, TxRing: ring, LegacyBD: legacy})
		if err != nil {
			t.Fatal(err)
		}
		n.Init()
		w.ring = func() []byte {
			b, err := mem.Coherent(dma.Addr(model.Read32(fec.ENETx_TDSR)), ring*size)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		rng := rand.New(rand.NewPCG(5, 5))
		for i := 0; i < 12; i++ {
			free := n.TxFree()
			if i%3 == 0 {
				if err := n.Transmit([][]byte{randomFrame(rng, 100+50*i, [6]byte{2})}, fec.TxOptions{}, nil); err != nil {
					t.Fatal(err)
				}
			} else {
				hdr, pay := bigPacket(t, frameSpec{payload: 3000 + 1000*i}, rng)
				if err := n.TransmitGSO(hdr, [][]byte{pay[:777], pay[777:]}, tso.Options{Type: tso.TCP, MSS: 1448, NeedsCsum: true}, nil); err != nil {
					t.Fatal(err)
				}
			}
			// The model sends at the doorbell: the uDMA now stops after
			// the descriptors just used.
			w.front = (w.front + free - n.TxFree()) % ring
			n.Reclaim()
		}
		if w.checks < 12 || w.bad != 0 {
			t.Fatalf("legacy %v: %d of %d publications came with other descriptor stores after the last barrier", legacy, w.bad, w.checks)
		}
	}
}

// TestGSOStatsCountEverySegment: a GSO packet's segments are counted in the
// TX statistics like frames (frames, bytes, descriptors, header bytes,
// bytes cleaned), though the GSO path adds them once per packet. Fails if
// addGSOCounts drops any of them.
func TestGSOStatsCountEverySegment(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{})
	caps, _ := fec.CapsFor(fec.IMX6UL)
	model := fectest.New(fectest.Options{Caps: caps, Mem: mem})
	n, err := fec.New(fec.Config{Regs: model, Mem: mem, Caps: caps, MAC: nicMAC, Strategy: bounce.SG, TxRing: 64})
	if err != nil {
		t.Fatal(err)
	}
	n.Init()
	rng := rand.New(rand.NewPCG(7, 7))
	var frames, bytes_, hdrs, descs uint64
	for i := 0; i < 4; i++ {
		hdr, pay := bigPacket(t, frameSpec{payload: 2000 + 3333*i}, rng)
		const mss = 1000
		segs := (len(pay) + mss - 1) / mss
		free := n.TxFree()
		if err := n.TransmitGSO(hdr, [][]byte{pay[:101], pay[101:]}, tso.Options{Type: tso.TCP, MSS: mss, NeedsCsum: true}, nil); err != nil {
			t.Fatal(err)
		}
		frames += uint64(segs)
		bytes_ += uint64(len(pay) + segs*len(hdr))
		hdrs += uint64(segs * len(hdr))
		descs += uint64(free - n.TxFree())
		n.Reclaim()
		st := n.Stats().Tx
		if st.Frames != frames || st.GSOSegments != frames || st.Bytes != bytes_ || st.HeaderBytes != hdrs || st.Descs != descs {
			t.Fatalf("packet %d: frames %d bytes %d header bytes %d descs %d (segments %d), want %d %d %d %d",
				i, st.Frames, st.Bytes, st.HeaderBytes, st.Descs, st.GSOSegments, frames, bytes_, hdrs, descs)
		}
		if st.Cleaned < st.Bytes || st.Cleaned%dma.CacheLine != 0 {
			t.Fatalf("packet %d: %d bytes cleaned for %d bytes sent", i, st.Cleaned, st.Bytes)
		}
	}
}
