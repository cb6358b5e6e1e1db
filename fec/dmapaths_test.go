package fec_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/tso"
)

// forgetful is a dma.Memory that leaves out one kind of maintenance: it
// stands for a driver path that does not do it.
type forgetful struct {
	*dmatest.Memory
	skipDevice func(dma.Buffer, dma.Dir) bool
	skipCPU    bool
	skipUnmap  bool
}

func (f forgetful) SyncForDevice(b *dma.Buffer, off, n int, d dma.Dir) {
	if f.skipDevice != nil && f.skipDevice(*b, d) {
		return
	}
	f.Memory.SyncForDevice(b, off, n, d)
}

func (f forgetful) SyncForCPU(b *dma.Buffer, off, n int, d dma.Dir) {
	if !f.skipCPU {
		f.Memory.SyncForCPU(b, off, n, d)
	}
}

func (f forgetful) Unmap(b *dma.Buffer, d dma.Dir) error {
	if f.skipUnmap {
		return nil
	}
	return f.Memory.Unmap(b, d)
}

// Every path that moves frame data through cacheable memory does its
// maintenance: TX in place (map, unmap), TX bounce buffers and TSO headers
// (clean), RX copybreak and zero-copy (invalidate before the CPU reads) and
// the RX refill (ownership back to the device). dmatest models a
// non-coherent cache: for each path, the driver's own maintenance leaves no
// violation and the bytes arrive intact, and leaving that path's
// maintenance out is caught. (On the board the buffers are cacheable since
// the MMU maps the buffer region as normal memory.)
func TestDMAMaintenanceIsCompleteOnEveryPath(t *testing.T) {
	cachedToDevice := func(b dma.Buffer, d dma.Dir) bool {
		return d == dma.ToDevice && b.Addr() >= dmatest.CachedBase && b.Addr() < dmatest.MapBase
	}
	cachedFromDevice := func(b dma.Buffer, d dma.Dir) bool { return d == dma.FromDevice }
	rng := rand.New(rand.NewPCG(6, 6))
	// receiveOne delivers one 900-byte frame and receives it; the path
	// taken (counted) must be the one path counts.
	receiveOne := func(path func(fec.Stats) uint64) func(*testing.T, *fectest.Rig, *tap) bool {
		return func(t *testing.T, r *fectest.Rig, tp *tap) bool {
			f := randomFrame(rng, 900, nicMAC)
			r.Model.Deliver(f, fectest.RxOK)
			p, err := r.NIC.Receive()
			if err != nil || p == nil {
				return false
			}
			defer p.Release()
			return bytes.Equal(p.Data, f) && path(r.NIC.Stats()) == 1
		}
	}
	paths := []struct {
		name   string
		soc    fec.SoC
		cfg    func(*fec.Config)
		forget forgetful
		run    func(t *testing.T, r *fectest.Rig, tp *tap) bool // reports the data intact
	}{
		{"tx in place", fec.IMX7D, func(c *fec.Config) { c.Strategy = bounce.SG }, forgetful{skipUnmap: true},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				f := randomFrame(rng, 1200, [6]byte{2})
				r.NIC.Transmit([][]byte{f[:100], f[100:]}, fec.TxOptions{}, nil)
				r.NIC.Reclaim()
				got := tp.take()
				return len(got) == 1 && bytes.Equal(got[0], f) && len(r.Mem.LiveMappings()) == 0 && r.NIC.Stats().Tx.Direct == 1
			}},
		{"tx bounce", fec.IMX6UL, func(c *fec.Config) { c.Strategy = bounce.Bounce }, forgetful{skipDevice: cachedToDevice},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				f := randomFrame(rng, 700, [6]byte{2})
				r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil)
				got := tp.take()
				return len(got) == 1 && bytes.Equal(got[0], f)
			}},
		{"tso headers", fec.IMX7D, func(c *fec.Config) { c.Strategy = bounce.SG }, forgetful{skipDevice: cachedToDevice},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				hdr, pay := bigPacket(t, frameSpec{payload: 8000}, rng)
				if err := r.NIC.TransmitGSO(hdr, [][]byte{pay}, tso.Options{Type: tso.TCP, MSS: 1448, NeedsCsum: true}, nil); err != nil {
					t.Fatal(err)
				}
				r.NIC.Reclaim()
				got := tp.take()
				ok := len(got) == 6
				for _, g := range got {
					ok = ok && bytes.Equal(g[:14], hdr[:14])
				}
				return ok && len(r.Mem.LiveMappings()) == 0
			}},
		{"rx copybreak", fec.IMX6UL, func(c *fec.Config) { c.Copybreak = 2048 }, forgetful{skipCPU: true},
			receiveOne(func(st fec.Stats) uint64 { return st.Rx.Copybreak })},
		{"rx zero-copy", fec.IMX6UL, func(c *fec.Config) { c.Copybreak = -1 }, forgetful{skipCPU: true},
			receiveOne(func(st fec.Stats) uint64 { return st.Rx.ZeroCopy })},
		{"rx peek", fec.IMX6UL, func(c *fec.Config) { c.Copybreak = -1 }, forgetful{skipCPU: true},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				f := randomFrame(rng, 900, nicMAC)
				r.Model.Deliver(f, fectest.RxOK)
				b, _, st := r.NIC.Peek(0, 2000)
				return st == fec.PeekFrame && bytes.Equal(b, f) && r.NIC.DropNext() == nil
			}},
		{"rx drop in place", fec.IMX6UL, func(c *fec.Config) { c.RxRing = 2 }, forgetful{skipDevice: cachedFromDevice},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				ok := true
				for i := 0; i < 6; i++ {
					f := randomFrame(rng, 900, nicMAC)
					r.Model.Deliver(f, fectest.RxOK)
					b, _, st := r.NIC.Peek(0, 2000)
					ok = ok && st == fec.PeekFrame && bytes.Equal(b, f) && r.NIC.DropNext() == nil
				}
				return ok && r.NIC.Stats().Rx.Skipped == 6
			}},
		{"rx refill", fec.IMX6UL, func(c *fec.Config) { c.Copybreak = -1; c.RxRing = 2; c.RxSpare = 2 }, forgetful{skipDevice: cachedFromDevice},
			func(t *testing.T, r *fectest.Rig, tp *tap) bool {
				ok := true
				for i := 0; i < 6; i++ {
					f := randomFrame(rng, 900, nicMAC)
					r.Model.Deliver(f, fectest.RxOK)
					p, err := r.NIC.Receive()
					if err != nil || p == nil {
						return false
					}
					ok = ok && bytes.Equal(p.Data, f)
					p.Release()
				}
				return ok
			}},
	}
	for _, p := range paths {
		for _, forget := range []bool{false, true} {
			mem := dmatest.New(nil, dmatest.Options{})
			var dm dma.Memory = mem
			if forget {
				f := p.forget
				f.Memory = mem
				dm = f
			}
			r, tp := newTapRig(t, fectest.RigOptions{SoC: p.soc, Mem: mem, Config: func(c *fec.Config) {
				c.Mem = dm
				p.cfg(c)
			}})
			intact := p.run(t, r, tp)
			viol := mem.Take()
			r.Model.Violations()
			caught := len(viol) > 0 || !intact
			if !forget && (len(viol) > 0 || !intact) {
				t.Fatalf("%s: intact=%v, violations %v", p.name, intact, viol)
			}
			if forget && !caught {
				t.Fatalf("%s: leaving its maintenance out went unnoticed", p.name)
			}
		}
	}
}
