package fec_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// Steady-state TX and RX allocate nothing per frame (driver and model
// together; the model is allocation-free without a peer).
func TestSteadyStateAllocatesNothing(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are not meaningful under -cover or -race")
	}
	for _, s := range strategies {
		r := fectest.NewRig(t, fectest.RigOptions{NoTrace: true, NoDone: true, Config: func(c *fec.Config) { c.Strategy = s }})
		for _, l := range benchLayouts {
			frags := layoutFrags(l.lens, l.mis, 1514)
			i := 0
			a := testing.AllocsPerRun(2000, func() {
				if err := r.NIC.Transmit(frags, fec.TxOptions{}, nil); err != nil {
					t.Fatal(err)
				}
				if i++; i%8 == 0 {
					r.NIC.Reclaim()
				}
			})
			if a != 0 {
				t.Errorf("TX %v %s: %.2f allocations per frame", s, l.name, a)
			}
		}
	}
	r := fectest.NewRig(t, fectest.RigOptions{NoTrace: true, NoDone: true})
	rng := rand.New(rand.NewPCG(1, 1))
	for _, size := range []int{100, 1500} { // copybreak, then zero-copy
		f := randomFrame(rng, size, nicMAC)
		a := testing.AllocsPerRun(2000, func() {
			r.Model.Deliver(f, fectest.RxOK)
			p, err := r.NIC.Receive()
			if err != nil || p == nil {
				t.Fatal(err)
			}
			p.Release()
		})
		if a != 0 {
			t.Errorf("RX %d bytes: %.2f allocations per frame", size, a)
		}
	}
}
