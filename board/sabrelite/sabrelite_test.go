package sabrelite

import (
	"errors"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// regs is a register file; read, when set, overrides reads.
type regs struct {
	m    map[uint32]uint32
	read func(off uint32) (uint32, bool)
}

func newRegs() *regs { return &regs{m: map[uint32]uint32{}} }

func (r *regs) Read32(off uint32) uint32 {
	if r.read != nil {
		if v, ok := r.read(off); ok {
			return v
		}
	}
	return r.m[off]
}
func (r *regs) Write32(off, v uint32) { r.m[off] = v }

func TestGlobalTimerConversions(t *testing.T) {
	for _, hz := range []uint64{100_000_000, 396_000_000, 498_000_000} {
		r := newRegs()
		gt := NewGlobalTimer(r, hz, func() {})
		if r.m[GT_CONTROL]&GT_CONTROL_TIMER_EN == 0 {
			t.Fatalf("%d Hz: counter not started", hz)
		}
		// One hour of counts is one hour, to the nanosecond.
		c := hz * 3600
		r.m[GT_COUNTER_LO], r.m[GT_COUNTER_HI] = uint32(c), uint32(c>>32)
		if got := gt.Now(); got < 3600e9-1 || got > 3600e9+1 {
			t.Errorf("%d Hz: %d counts = %d ns, want 3600e9", hz, c, got)
		}
		// An alarm never fires early: the compare value is rounded up.
		for _, ns := range []int64{1, 999, 1_000_000_007, 3600e9} {
			k := gt.nsToTicks(ns)
			if gt.ticksToNs(k) < ns || k > 0 && gt.ticksToNs(k-1) >= ns {
				t.Errorf("%d Hz: %d ns -> %d ticks (-> %d ns)", hz, ns, k, gt.ticksToNs(k))
			}
		}
	}
}

func TestGlobalTimerTornRead(t *testing.T) {
	r := newRegs()
	gt := NewGlobalTimer(r, 100_000_000, func() {})
	// The low half wraps between the first high read and the low read.
	his := []uint32{1, 2, 2, 2}
	los := []uint32{0x00000005}
	r.read = func(off uint32) (uint32, bool) {
		switch off {
		case GT_COUNTER_HI:
			v := his[0]
			his = his[1:]
			return v, true
		case GT_COUNTER_LO:
			v := los[0]
			los = append(los[1:], 0x00000006)
			return v, true
		}
		return 0, false
	}
	if c := gt.Counter(); c != 2<<32|6 {
		t.Fatalf("counter %#x, want %#x", c, uint64(2<<32|6))
	}
}

func TestGlobalTimerAlarm(t *testing.T) {
	r := newRegs()
	gt := NewGlobalTimer(r, 100_000_000, func() {})
	gt.SetAlarm(10_000_000_005) // 10 s + 5 ns: tick 1_000_000_001
	if cmp := uint64(r.m[GT_COMP_HI])<<32 | uint64(r.m[GT_COMP_LO]); cmp != 1_000_000_001 {
		t.Errorf("comparator %d", cmp)
	}
	if c := r.m[GT_CONTROL]; c&(GT_CONTROL_TIMER_EN|GT_CONTROL_COMP_EN|GT_CONTROL_IRQ_EN) != 7 {
		t.Errorf("control %#x after SetAlarm", c)
	}
	r.m[GT_INT_STATUS] = 0
	gt.SetAlarm(0)
	if c := r.m[GT_CONTROL]; c != GT_CONTROL_TIMER_EN {
		t.Errorf("control %#x after disarm", c)
	}
	if r.m[GT_INT_STATUS] != 1 {
		t.Errorf("event flag not cleared on disarm")
	}
	if !gt.IsAlarm(27) || gt.IsAlarm(29) || gt.IsAlarm(ENETIRQ) {
		t.Errorf("IsAlarm")
	}
}

func TestGIC(t *testing.T) {
	d, c := newRegs(), newRegs()
	d.m[GICD_TYPER] = 4 // 160 lines
	d.m[GICD_ITARGETSR+148] = 0x02000000
	g := &GIC{Dist: d, CPU: c}
	g.Init()
	if d.m[GICD_ICENABLER+16] != ^uint32(0) || d.m[GICD_CTLR] != 1 || c.m[GICC_CTLR] != 1 {
		t.Fatalf("init: dist %v cpu %v", d.m, c.m)
	}
	g.Enable(ENETIRQ) // 150: ITARGETSR byte 2 of word 148, enable bit 22 of word 4
	if d.m[GICD_ITARGETSR+148] != 0x00010000|0x02000000 {
		t.Errorf("ITARGETSR %#x", d.m[GICD_ITARGETSR+148])
	}
	if d.m[GICD_ISENABLER+16] != 1<<22 {
		t.Errorf("ISENABLER4 %#x", d.m[GICD_ISENABLER+16])
	}
	g.Enable(GlobalTimerIRQ)
	if _, ok := d.m[GICD_ITARGETSR+24]; ok {
		t.Errorf("a PPI was targeted")
	}
	c.m[GICC_IAR] = 0x400 | ENETIRQ // CPU ID bits kept in EOIR
	if id := g.Next(); id != ENETIRQ || c.m[GICC_EOIR] != 0x400|ENETIRQ {
		t.Errorf("Next %d, EOIR %#x", id, c.m[GICC_EOIR])
	}
	c.m[GICC_EOIR] = 0
	c.m[GICC_IAR] = 1023
	if id := g.Next(); id != 1023 || c.m[GICC_EOIR] != 0 {
		t.Errorf("spurious: %d, EOIR %#x", id, c.m[GICC_EOIR])
	}
}

func TestEnableL2(t *testing.T) {
	// QEMU: nothing at 0x00A02000 (reads zero).
	r := &mmio.Recorder{Regs: newRegs()}
	if on, err := EnableL2(r, 10); on || err != nil || len(r.Log) != 1 {
		t.Fatalf("no PL310: on=%v err=%v log %v", on, err, r.Log)
	}
	// Silicon, L2 off: latencies and aux before the invalidate, the
	// enable last.
	f := newRegs()
	f.m[L2_CACHE_ID] = 0x410000C8
	f.m[L2_AUX_CTRL] = 0x02050000                                            // 16 ways
	f.read = func(off uint32) (uint32, bool) { return 0, off == L2_INV_WAY } // completes at once
	r = &mmio.Recorder{Regs: f}
	if on, err := EnableL2(r, 10); !on || err != nil {
		t.Fatalf("on=%v err=%v", on, err)
	}
	var writes []mmio.Access
	for _, a := range r.Log {
		if a.Write {
			writes = append(writes, a)
		}
	}
	want := []mmio.Access{{Write: true, Off: L2_TAG_LATENCY, Val: 0x132}, {Write: true, Off: L2_DATA_LATENCY, Val: 0x132},
		{Write: true, Off: L2_AUX_CTRL, Val: 0x02050000 | 1<<22 | 1<<28 | 1<<29}, {Write: true, Off: L2_INV_WAY, Val: 0xFFFF},
		{Write: true, Off: L2_CACHE_SYNC, Val: 0}, {Write: true, Off: L2_CTRL, Val: 1}}
	if len(writes) != len(want) {
		t.Fatalf("writes %v, want %v", writes, want)
	}
	for i := range want {
		if writes[i] != want[i] {
			t.Fatalf("write %d: %+v, want %+v (all %v)", i, writes[i], want[i], writes)
		}
	}
	// Already on (the boot loader): left alone.
	r = &mmio.Recorder{Regs: f}
	if on, err := EnableL2(r, 10); !on || err != nil || len(r.Log) != 2 {
		t.Fatalf("already on: %v %v %v", on, err, r.Log)
	}
	// An invalidate that never completes is an error, not a hang.
	g := newRegs()
	g.m[L2_CACHE_ID] = 0x410000C8
	g.read = func(off uint32) (uint32, bool) { return 0xFF, off == L2_INV_WAY }
	if on, err := EnableL2(g, 10); on || err == nil {
		t.Fatalf("stuck invalidate: on=%v err=%v", on, err)
	}
}

// mdioTap logs the clause-22 writes a driver sends.
type mdioTap struct {
	mmio.Regs
	writes [][2]int // register, value
}

func (m *mdioTap) Write32(off, v uint32) {
	if off == fec.ENETx_MMFR {
		ra := int(v>>fec.MMFR_RA) & 0x1F
		if v>>28&3 == 1 {
			m.writes = append(m.writes, [2]int{ra, int(v & 0xFFFF)})
		}
	}
	m.Regs.Write32(off, v)
}

// setupRig is an i.MX6Q ENET in RGMII on fectest's model, its PHY at
// address 6: a KSZ9021 (1000BASE-T, ID 0x00221611) when gbit, else the
// model's KSZ8081; the link partner does 1000 full.
func setupRig(t *testing.T, gbit bool) (*fectest.Rig, *mdioTap) {
	tap := &mdioTap{}
	r := fectest.NewRig(t, fectest.RigOptions{SoC: fec.IMX6Q,
		Model: func(o *fectest.Options) { o.PHYAddr = PHYAddr; o.PartnerGbit = true; o.PHYGbit = gbit },
		Config: func(c *fec.Config) {
			tap.Regs = c.Regs
			c.Regs = tap
			c.Interface = fec.RGMII
		}})
	return r, tap
}

// stopAtEnd returns a channel closed when the test ends (the link watch
// SetupPHY starts stops with it).
func stopAtEnd(t *testing.T) chan struct{} {
	c := make(chan struct{})
	t.Cleanup(func() { close(c) })
	return c
}

func TestSetupPHYKSZ9021(t *testing.T) {
	r, tap := setupRig(t, true)
	tap.writes = nil
	id, l, err := SetupPHY(r.NIC, stopAtEnd(t), nil)
	if err != nil || id != 0x00221611 {
		t.Fatalf("id %#x err %v", id, err)
	}
	if l != (fec.Link{Up: true, Speed: 1000, FullDuplex: true}) || r.NIC.Link() != l {
		t.Fatalf("link %v, MAC %v", l, r.NIC.Link())
	}
	// Reset, then the three skews through the extended-register window,
	// then advertisement and the autonegotiation restart.
	w := tap.writes
	if len(w) < 7 || w[0] != [2]int{fec.MII_BMCR, fec.BMCR_RESET} {
		t.Fatalf("writes %x", w)
	}
	wantSkew := [][2]int{{0x0B, 0x8104}, {0x0C, 0xF0F0}, {0x0B, 0x8105}, {0x0C, 0}, {0x0B, 0x8106}, {0x0C, 0}}
	for i, s := range wantSkew {
		if w[1+i] != s {
			t.Fatalf("write %d: %x, want %x (all %x)", 1+i, w[1+i], s, w)
		}
	}
	if last := w[len(w)-1]; last[0] != fec.MII_BMCR || last[1]&fec.BMCR_ANRESTART == 0 {
		t.Fatalf("autonegotiation not restarted last: %x", w)
	}
}

func TestSetupPHYOther(t *testing.T) {
	// The model's 10/100 PHY (a KSZ8081 ID, like QEMU's not a KSZ9021):
	// no extended-register writes.
	r, tap := setupRig(t, false)
	tap.writes = nil
	id, _, err := SetupPHY(r.NIC, stopAtEnd(t), nil)
	if err != nil || id&KSZ9021IDMask == KSZ9021ID {
		t.Fatalf("id %#x err %v", id, err)
	}
	for _, w := range tap.writes {
		if w[0] == KSZ9021_EXTREG || w[0] == KSZ9021_EXTREG_WDATA {
			t.Fatalf("extended register written on a non-KSZ9021: %x", tap.writes)
		}
	}
}

func TestSetupPHYMissing(t *testing.T) {
	tap := &mdioTap{}
	r := fectest.NewRig(t, fectest.RigOptions{SoC: fec.IMX6Q,
		Model:  func(o *fectest.Options) { o.PHYAddr = 40 }, // answers nowhere
		Config: func(c *fec.Config) { tap.Regs = c.Regs; c.Regs = tap }})
	if _, _, err := SetupPHY(r.NIC, stopAtEnd(t), nil); err == nil || errors.Is(err, fec.ErrTimeout) {
		t.Fatalf("no PHY: %v", err)
	}
}

// TestSetupPHYWatchesTheLink: after SetupPHY the MAC follows the link: a
// cable pulled marks it down, a partner back at 100 Mb/s full duplex
// reprograms it (before, the SABRE Lite autonegotiated once at boot).
func TestSetupPHYWatchesTheLink(t *testing.T) {
	r, _ := setupRig(t, true)
	if _, _, err := SetupPHY(r.NIC, stopAtEnd(t), nil); err != nil {
		t.Fatal(err)
	}
	wait := func(want fec.Link) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if r.NIC.Link() == want {
				return
			}
		}
		t.Fatalf("MAC link %v, want %v", r.NIC.Link(), want)
	}
	r.Model.SetLink(false)
	wait(fec.Link{Speed: 1000, FullDuplex: true})
	r.Model.SetPartner(fec.ADV_100FULL, false, nil)
	r.Model.SetLink(true)
	wait(fec.Link{Up: true, Speed: 100, FullDuplex: true})
}
