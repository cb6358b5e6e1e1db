package usbarmory

import (
	"sync"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// mdioFrame is one clause-22 frame the driver started (an MMFR write).
type mdioFrame struct {
	write  bool
	pa, ra int
	data   uint16
}

// mdioTrace records the MDIO frames written to MMFR, then passes every
// access on to the model. The model's PHY answers at address 2 (its
// default, ENET1's on the EVK; 0 in its options means that default), so
// the trace wires MDIO address 0, the DP83825I's on the Mk II LAN, to it
// and every other address to 31, where nothing answers.
type mdioTrace struct {
	mmio.Regs
	mu     sync.Mutex
	frames []mdioFrame
}

const modelPHYAddr = 2

func (m *mdioTrace) Write32(off, v uint32) {
	if off == fec.ENETx_MMFR {
		pa := int(v>>fec.MMFR_PA) & 0x1F
		m.mu.Lock()
		m.frames = append(m.frames, mdioFrame{write: v>>28&3 == 1, pa: pa,
			ra: int(v>>fec.MMFR_RA) & 0x1F, data: uint16(v & fec.MMFR_DATA)})
		m.mu.Unlock()
		to := uint32(31)
		if pa == phyAddr {
			to = modelPHYAddr
		}
		v = v&^(0x1F<<fec.MMFR_PA) | to<<fec.MMFR_PA
	}
	m.Regs.Write32(off, v)
}

// TestENET2LinkRestoresRCSR takes over a PHY at address 0 with ENET2's
// link configuration, as the firmware does: after the PHY's soft reset
// (BMCR.RESET) and before autonegotiation restarts, RCSR (0x17) is written
// with 0x81 (RMII_CS: 50 MHz reference clock, RX_BUF), the value TamaGo's
// mk2 EnablePHY writes, and the PHY holds it.
func TestENET2LinkRestoresRCSR(t *testing.T) {
	tr := &mdioTrace{}
	r := fectest.NewRig(t, fectest.RigOptions{
		Model:  func(o *fectest.Options) { o.PHYAddr = modelPHYAddr },
		Config: func(c *fec.Config) { tr.Regs = c.Regs; c.Regs = tr },
	})
	p, err := r.NIC.StartLink(enet2Link())
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr != 0 {
		t.Errorf("PHY at %d, want 0", p.Addr)
	}
	tr.mu.Lock()
	frames := append([]mdioFrame(nil), tr.frames...)
	tr.mu.Unlock()
	reset, rcsr, anRestart := -1, -1, -1
	for i, f := range frames {
		if !f.write {
			continue
		}
		if f.pa != 0 {
			t.Errorf("frame %d: write to PHY %d, want 0 only: %+v", i, f.pa, f)
		}
		switch {
		case f.ra == fec.MII_BMCR && f.data&fec.BMCR_RESET != 0 && reset < 0:
			reset = i
		case f.ra == dpRCSR:
			if rcsr >= 0 {
				t.Errorf("RCSR written twice (frames %d and %d)", rcsr, i)
			}
			rcsr = i
			if f.data != 0x81 {
				t.Errorf("RCSR written %#04x, want 0x81 (RMII_CS | RX_BUF)", f.data)
			}
		case f.ra == fec.MII_BMCR && f.data&fec.BMCR_ANRESTART != 0 && anRestart < 0 && reset >= 0:
			anRestart = i
		}
	}
	if reset < 0 || rcsr < 0 || anRestart < 0 || !(reset < rcsr && rcsr < anRestart) {
		t.Fatalf("MDIO writes: BMCR reset at frame %d, RCSR at %d, autonegotiation restart at %d; want reset < RCSR < restart\n%+v",
			reset, rcsr, anRestart, frames)
	}
	// Read back through the driver: the PHY holds the value.
	if v, err := r.NIC.MDIORead(0, dpRCSR); err != nil || v != 0x81 {
		t.Errorf("RCSR reads %#04x %v, want 0x81", v, err)
	}
}
