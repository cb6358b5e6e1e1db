package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// rewrite is a register interface that alters the driver's writes to one
// register: it stands for a driver lacking one rule.
type rewrite struct {
	mmio.Regs
	off uint32
	f   func(uint32) uint32
}

func (r rewrite) Write32(off, v uint32) {
	if off == r.off {
		v = r.f(v)
	}
	r.Regs.Write32(off, v)
}

// Checksum insertion needs TFWR.STRFWD: without it the MAC does not hold
// the whole frame and sends the fields as given (zeroed by the driver).
func TestChecksumInsertionNeedsStoreAndForward(t *testing.T) {
	for _, strfwd := range []bool{true, false} {
		r, tp := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) {
			if !strfwd {
				c.Regs = rewrite{c.Regs, fec.ENETx_TFWR, func(v uint32) uint32 { return v &^ fec.TFWR_STRFWD }}
			}
		}})
		f := build(t, frameSpec{payload: 300}, [6]byte{2}, rand.New(rand.NewPCG(1, 1)))
		if err := r.NIC.Transmit([][]byte{bytes.Clone(f)}, fec.TxOptions{Csum: true}, nil); err != nil {
			t.Fatal(err)
		}
		got := tp.take()
		if len(got) != 1 {
			t.Fatalf("%d frames", len(got))
		}
		ipOK := ones(got[0][14:34]) == 0xFFFF
		if strfwd && (!ipOK || !bytes.Equal(got[0], f)) {
			t.Fatal("with STRFWD: checksums not inserted as gopacket computes them")
		}
		if !strfwd && (ipOK || r.Model.Stats().CsumWithoutStrfwd != 1) {
			t.Fatal("without STRFWD the model still inserted checksums")
		}
	}
}

// TDAR runs beside the CPU. ERR007885: a TDAR write while the uDMA clears
// it hangs TX, so the driver writes only after reading 0; a kick it skips
// that way can be missed (the uDMA had already looked), and the reclaim
// pass re-kicks (ERR006358 rule, on every SoC).
func TestAsyncTDARKickRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	async := func(o *fectest.Options) { o.AsyncTx = true }
	// Without the read-before-write rule the driver hangs the uDMA.
	r, _ := newTapRig(t, fectest.RigOptions{SoC: fec.IMX6UL, Model: async,
		Config: func(c *fec.Config) { c.Caps.Quirks &^= fec.QuirkERR007885 }})
	r.NIC.Transmit([][]byte{randomFrame(rng, 100, [6]byte{2})}, fec.TxOptions{}, nil)
	r.Model.StepTx() // sends the frame
	r.Model.StepTx() // finds no more: closing, TDAR still 1
	r.NIC.Transmit([][]byte{randomFrame(rng, 100, [6]byte{2})}, fec.TxOptions{}, nil)
	if v := r.Model.Violations(); len(v) != 1 || !strings.Contains(v[0], "ERR007885") {
		t.Fatalf("a blind TDAR write in the closing window: %v", v)
	}
	// With the rules the same sequence loses nothing.
	r, tp := newTapRig(t, fectest.RigOptions{SoC: fec.IMX6UL, Model: async})
	a, b := randomFrame(rng, 100, [6]byte{2}), randomFrame(rng, 100, [6]byte{2})
	r.NIC.Transmit([][]byte{a}, fec.TxOptions{}, nil)
	r.Model.StepTx()
	r.Model.StepTx()
	r.NIC.Transmit([][]byte{b}, fec.TxOptions{}, nil) // TDAR reads 1: kick skipped
	r.Model.StepTx()                                  // closing ends: b stranded
	if got := tp.take(); len(got) != 1 || !bytes.Equal(got[0], a) {
		t.Fatalf("%d frames before the missed kick", len(got))
	}
	r.NIC.Reclaim() // re-kick
	r.Model.StepTx()
	if got := tp.take(); len(got) != 1 || !bytes.Equal(got[0], b) {
		t.Fatalf("stranded frame not sent after reclaim: %d frames", len(got))
	}
	if st := r.NIC.Stats().Tx; st.KicksSkipped != 1 || st.Rekicks != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Random interleavings of the driver and an asynchronous uDMA on every SoC:
// every frame goes out once, in order, and nothing hangs.
func TestAsyncTDARRandomInterleavings(t *testing.T) {
	for _, soc := range fec.AllSoCs {
		rng := rand.New(rand.NewPCG(uint64(soc), 11))
		r, tp := newTapRig(t, fectest.RigOptions{SoC: soc, Model: func(o *fectest.Options) { o.AsyncTx = true }})
		const n = 400
		var want [][]byte
		var got [][]byte
		for steps := 0; len(got) < n && steps < 100*n; steps++ {
			switch k := rng.IntN(10); {
			case k < 4 && len(want) < n:
				f := randomFrame(rng, 60+rng.IntN(200), [6]byte{2})
				f[14], f[15] = byte(len(want)>>8), byte(len(want))
				if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err == nil {
					want = append(want, f)
				} else if !errors.Is(err, fec.ErrRingFull) {
					t.Fatal(err)
				}
			case k < 8:
				r.Model.StepTx()
			default:
				r.NIC.Reclaim()
			}
			got = append(got, tp.take()...)
		}
		if len(got) != n {
			t.Fatalf("%v: %d of %d frames sent; ring:\n%s", soc, len(got), n, r.NIC.DumpTx())
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%v: frame %d out of order or corrupted", soc, i)
			}
		}
	}
}

// The uDMA may clear E (RX) or R (TX) before it writes the enhanced words
// and BDU. The driver must wait for BDU: before it, verdicts and error bits
// are stale (the old driver delivered a MAC-error frame as good and
// completed a failed TX frame without error).
func TestBDUMayLagBehindE(t *testing.T) {
	r, _ := newTapRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.LagBDU = true }})
	rng := rand.New(rand.NewPCG(5, 5))
	good := build(t, frameSpec{payload: 400}, nicMAC, rng)
	r.Model.Deliver(good, fectest.RxOK)
	if p, err := r.NIC.Receive(); p != nil || err != nil {
		t.Fatalf("frame taken before BDU (packet %v, err %v)", p != nil, err)
	}
	r.Model.StepBDU()
	p, err := r.NIC.Receive()
	if err != nil || p == nil || !bytes.Equal(p.Data, good) || p.Csum != (fec.CsumInfo{IPv4: true, L4: true}) {
		t.Fatalf("after BDU: %v %v", p, err)
	}
	p.Release()
	r.Model.Deliver(randomFrame(rng, 100, nicMAC), fectest.RxMACError)
	if p, err := r.NIC.Receive(); p != nil || err != nil {
		t.Fatalf("MAC-error frame taken before BDU (packet %v, err %v)", p != nil, err)
	}
	r.Model.StepBDU()
	var fe *fec.FrameError
	if _, err := r.NIC.Receive(); !errors.As(err, &fe) || fe.Kind != fec.RxMACError {
		t.Fatalf("after BDU: %v", err)
	}
	// TX: the error status arrives with BDU.
	r.Model.SetFaults(fectest.Faults{TxError: fec.TXE_TXE | fec.TXE_UE, TxErrorCount: 1})
	r.NIC.Transmit([][]byte{randomFrame(rng, 100, [6]byte{2})}, fec.TxOptions{}, "x")
	r.NIC.Reclaim()
	if d := r.Completions(); len(d) != 0 {
		t.Fatalf("completed before BDU: %+v", d)
	}
	r.Model.StepBDU()
	r.NIC.Reclaim()
	if d := r.Completions(); len(d) != 1 || !errors.Is(d[0].Err, fec.ErrTxFailed) {
		t.Fatalf("after BDU: %+v", d)
	}
}

// RACC.SHIFT16 works with legacy descriptors too (QEMU honours it only
// with enhanced ones): a driver that sets it there must skip the pad. The
// driver leaves it off with legacy descriptors; one that set it without
// skipping would hand up shifted data, which the model now shows.
func TestRxSHIFT16AppliesToLegacyDescriptors(t *testing.T) {
	f := randomFrame(rand.New(rand.NewPCG(2, 9)), 200, nicMAC)
	for _, forced := range []bool{false, true} {
		r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) {
			c.LegacyBD = true
			if forced {
				c.Regs = rewrite{c.Regs, fec.ENETx_RACC, func(v uint32) uint32 { return v | fec.RACC_SHIFT16 }}
			}
		}})
		if !forced && r.Model.Read32(fec.ENETx_RACC)&fec.RACC_SHIFT16 != 0 {
			t.Fatal("SHIFT16 set with legacy descriptors")
		}
		r.Model.Deliver(f, fectest.RxOK)
		p, err := r.NIC.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if intact := bytes.Equal(p.Data, f); intact == forced {
			t.Fatalf("SHIFT16 forced=%v: frame intact=%v", forced, intact)
		}
		p.Release()
	}
}
