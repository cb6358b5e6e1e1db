package fec_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// On the multi-queue parts the MAC is stopped with ECR=0, which resets
// nothing: TX accelerator, interrupt coalescing, RX classification and DMA
// class state left by a boot loader must be cleared by the driver, or TX
// frames lose their first two bytes (TACC.SHIFT16), interrupts wait for 200
// frames (RXIC0) and VLAN frames are steered to a ring nobody set up.
func TestMultiQueueStateLeftByABootLoaderIsCleared(t *testing.T) {
	for _, soc := range []fec.SoC{fec.IMX6SX, fec.IMX7D} {
		stale := map[uint32]uint32{
			fec.ENETx_TACC:    fec.TACC_SHIFT16,
			fec.ENETx_TXIC0:   fec.IC_ICEN | 200<<fec.IC_ICFT | 1000,
			fec.ENETx_RXIC0:   fec.IC_ICEN | 200<<fec.IC_ICFT | 1000,
			fec.ENETx_TXIC1:   fec.IC_ICEN | 200<<fec.IC_ICFT,
			fec.ENETx_RXIC2:   fec.IC_ICEN | 200<<fec.IC_ICFT,
			fec.ENETx_RCMR1:   fec.RCMR_MATCHEN | 0x3210,
			fec.ENETx_RCMR2:   fec.RCMR_MATCHEN | 0x7654,
			fec.ENETx_DMA1CFG: fec.DMACFG_CLASSEN | 0x200,
			fec.ENETx_DMA2CFG: fec.DMACFG_CLASSEN | 0x200,
		}
		r, tp := newTapRig(t, fectest.RigOptions{SoC: soc, Config: func(c *fec.Config) { c.Interrupts = true },
			Prepare: func(m *fectest.Model) {
				for reg, v := range stale {
					m.Write32(reg, v)
				}
			}})
		for reg := range stale {
			if v := r.Model.Read32(reg); v != 0 {
				t.Errorf("%v: register %#x still %#x after Init", soc, reg, v)
			}
		}
		rng := rand.New(rand.NewPCG(3, 3))
		f := randomFrame(rng, 200, [6]byte{2})
		if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		if got := tp.take(); len(got) != 1 || !bytes.Equal(got[0], f) {
			t.Fatalf("%v: TX frame altered on the wire", soc)
		}
		// A VLAN frame with priority 0 stays on ring 0 and interrupts at once.
		g := randomFrame(rng, 200, nicMAC)
		g[12], g[13], g[14], g[15] = 0x81, 0x00, 0x00, 0x2A
		for len(r.Model.IRQ()) > 0 {
			<-r.Model.IRQ()
		}
		if !r.Model.Deliver(g, fectest.RxOK) {
			t.Fatalf("%v: VLAN frame not received on ring 0", soc)
		}
		select {
		case <-r.Model.IRQ():
		default:
			t.Fatalf("%v: no RX interrupt: coalescing left on", soc)
		}
		if p, err := r.NIC.Receive(); err != nil || !bytes.Equal(p.Data, g) {
			t.Fatalf("%v: %v", soc, err)
		}
	}
}

// Writing MMFR while MSCR is running starts an MDIO frame; MMFR may be
// cleared only while MSCR is zero, right before MSCR is set, and MSCR is
// not rewritten with the value it holds. The old driver cleared MMFR on
// every restart: on the multi-queue parts (ECR=0 keeps MSCR) that put a
// stray frame on the MDIO bus.
func TestMDIOSetupClearsMMFROnlyBeforeMSCR(t *testing.T) {
	for _, soc := range fec.AllSoCs {
		r := fectest.NewRig(t, fectest.RigOptions{SoC: soc})
		for i := 0; i < 3; i++ {
			if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 100, FullDuplex: i%2 == 0}); err != nil {
				t.Fatal(err)
			}
			if v, err := r.NIC.MDIORead(2, fec.MII_PHYID1); err != nil || v != 0x0022 {
				t.Fatalf("%v: PHY ID %#x, %v after restart %d", soc, v, err, i)
			}
		}
		if v := r.Model.Violations(); len(v) != 0 {
			t.Fatalf("%v: %v", soc, v)
		}
	}
}

// MDC must stay at or under 2.5 MHz whatever the board's IPG clock: the
// board passes its clock, New refuses one MII_SPEED cannot divide, and the
// model reports an MDC above the limit (what a board that leaves the 66 MHz
// default on a faster clock would produce).
func TestMDCStaysAtOrUnder2_5MHz(t *testing.T) {
	const ipg = 132_000_000
	r := fectest.NewRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.IPGClock = ipg },
		Config: func(c *fec.Config) { c.IPGClock = ipg }})
	if _, err := r.NIC.MDIORead(2, fec.MII_BMSR); err != nil {
		t.Fatal(err)
	}
	if v := r.Model.Read32(fec.ENETx_MSCR); v != 26<<1|1<<8 {
		t.Fatalf("MSCR %#x for a 132 MHz IPG clock, want MII_SPEED 26 HOLDTIME 1", v)
	}
	// The same board with the clock left at its default.
	wrong := fectest.NewRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.IPGClock = ipg }})
	wrong.NIC.MDIORead(2, fec.MII_BMSR)
	if v := wrong.Model.Violations(); len(v) == 0 {
		t.Fatal("MDC above 2.5 MHz went unnoticed")
	}
	caps, _ := fec.CapsFor(fec.IMX6UL)
	if _, err := fec.New(fec.Config{Regs: r.Model, Mem: r.Mem, Caps: caps, IPGClock: 1_000_000_000}); err == nil {
		t.Fatal("a 1 GHz IPG clock accepted: MII_SPEED cannot divide it to 2.5 MHz")
	}
}
