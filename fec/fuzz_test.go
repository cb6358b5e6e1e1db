package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// FuzzTransmit: any frame, fragment layout, strategy, SoC and checksum
// request either is rejected with an error or reaches the wire exactly
// (checksum fields aside, which gopacket-based tests cover).
func FuzzTransmit(f *testing.F) {
	f.Add(uint64(1), uint16(1514), uint8(3), uint8(0), false)
	f.Add(uint64(2), uint16(20), uint8(1), uint8(1), false)
	f.Add(uint64(3), uint16(1984), uint8(12), uint8(4), true)
	f.Add(uint64(4), uint16(60), uint8(60), uint8(2), true)
	f.Fuzz(func(t *testing.T, seed uint64, size uint16, nfrag uint8, soc uint8, sg bool) {
		s := fec.AllSoCs[int(soc)%len(fec.AllSoCs)]
		caps, _ := fec.CapsFor(s)
		strat := bounce.Bounce
		if sg {
			strat = bounce.SG
		}
		r, tp := newTapRig(t, fectest.RigOptions{SoC: s, Config: func(c *fec.Config) {
			c.Strategy = strat
			c.MaxFrame = caps.MaxFrame
			c.TxRing = 32
			c.MaxTxDescs = 16
		}})
		rng := rand.New(rand.NewPCG(seed, 1))
		n := int(size) % (caps.MaxFrame + 100)
		fr := randomFrame(rng, n, [6]byte{2})
		frags := scatter(rng, fr, 1+int(nfrag)%40)
		err := r.NIC.Transmit(frags, fec.TxOptions{}, nil)
		if n < 14 || n > caps.MaxFrame {
			if err == nil {
				t.Fatalf("%d-byte frame accepted", n)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d bytes in %d fragments: %v", n, len(frags), err)
		}
		r.NIC.Reclaim()
		if got := tp.take(); len(got) != 1 || !bytes.Equal(got[0], padded(fr)) {
			t.Fatalf("wire differs for %d bytes in %d fragments", n, len(frags))
		}
		if r.NIC.TxFree() != 32 || len(r.Mem.LiveMappings()) != 0 {
			t.Fatal("descriptors or mappings leaked")
		}
	})
}

// FuzzReceive: whatever a descriptor says, Receive never panics, returns a
// packet whose data lies within the buffer or a counted error, and the ring
// keeps receiving good frames afterwards.
func FuzzReceive(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00\x00\x01abcdefgh\x08\x00E"), uint16(70), uint16(fec.RX_L), uint32(0), uint32(0))
	f.Add([]byte{}, uint16(0), uint16(fec.RX_L|fec.RX_CR), uint32(0), uint32(0))
	f.Add([]byte{1, 2, 3}, uint16(65535), uint16(fec.RX_L), uint32(fec.RXE_PCR), uint32(6<<24|5<<16))
	f.Add([]byte{1}, uint16(100), uint16(0), uint32(0), uint32(0))
	f.Add([]byte{1}, uint16(1600), uint16(fec.RX_L|fec.RX_LG), uint32(fec.RXE_ME), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, length uint16, st uint16, e0, e1 uint32) {
		r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.RxRing = 8; c.RxSpare = 2; c.Packets = 4 }})
		if !r.Model.InjectDescriptor(data, length, fec.RxStatus(st), e0, e1) {
			t.Fatal("no descriptor to inject into")
		}
		var held []*fec.Packet
		for i := 0; i < 3; i++ {
			p, err := r.NIC.Receive()
			var fe *fec.FrameError
			if err != nil && !errors.As(err, &fe) && !errors.Is(err, fec.ErrNoRxBuffer) {
				t.Fatalf("unexpected error %v", err)
			}
			if p != nil {
				if len(p.Data) < 14 || len(p.Data) > r.NIC.MaxFrame() {
					t.Fatalf("packet of %d bytes passed", len(p.Data))
				}
				held = append(held, p)
			}
		}
		for _, p := range held {
			p.Release()
		}
		st2 := r.NIC.Stats().Rx
		if st2.Frames != st2.Copybreak+st2.ZeroCopy {
			t.Fatalf("counters inconsistent %+v", st2)
		}
		// Drain whatever a bogus multi-buffer frame left, then prove the
		// ring still works.
		for k := 0; k < 10; k++ {
			p, err := r.NIC.Receive()
			if p == nil && err == nil {
				break
			}
			if p != nil {
				p.Release()
			}
		}
		// A descriptor without L announces more of the same frame: the
		// next one is its tail by definition, so one good frame may be
		// consumed as that tail. The second must arrive.
		good := randomFrame(rand.New(rand.NewPCG(1, 1)), 300, nicMAC)
		for try := 0; ; try++ {
			if try == 2 {
				t.Fatal("good frames lost after a bad descriptor")
			}
			if !r.Model.Deliver(good, fectest.RxOK) {
				t.Fatal("ring stuck after a bad descriptor")
			}
			p, _ := r.NIC.Receive()
			if p != nil {
				ok := bytes.Equal(p.Data, good)
				p.Release()
				if !ok {
					t.Fatal("good frame corrupted")
				}
				break
			}
		}
	})
}
