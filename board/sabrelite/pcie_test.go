package sabrelite

import (
	"errors"
	"testing"
	"time"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// pllModel is CCM_ANALOG_PLL_ENET as the analog block behaves: LOCK
// reads set only while the PLL is enabled and powered, after locks reads.
type pllModel struct {
	*regs
	locks    int // reads of the PLL register before it locks (<0: never)
	lockRead int
}

func newPLL(locks int) *pllModel {
	p := &pllModel{regs: newRegs(), locks: locks}
	// Reset state: powered down, bypassed (i.MX6DQ RM: PLL_ENET reset 0x00011001).
	p.m[ANADIG_PLL_ENET] = 0x00011001
	p.m[PMU_MISC1] = MISC1_LVDSCLK1_IBEN | 0x3
	p.read = func(off uint32) (uint32, bool) {
		if off != ANADIG_PLL_ENET {
			return 0, false
		}
		v := p.m[off] &^ PLL_ENET_LOCK
		if v&PLL_ENET_ENABLE != 0 && v&PLL_ENET_POWERDOWN == 0 && p.locks >= 0 {
			if p.lockRead++; p.lockRead > p.locks {
				v |= PLL_ENET_LOCK
			}
		}
		return v, true
	}
	return p
}

type fakeClock struct{ ns int64 }

func (c *fakeClock) now() int64                   { return c.ns }
func (c *fakeClock) delay(d time.Duration)        { c.ns += int64(d) }
func (c *fakeClock) nowFn() func() int64          { return c.now }
func (c *fakeClock) delayFn() func(time.Duration) { return c.delay }

// TestPCIeClocks: the CCM and analog writes of the clock bring-up, in the
// order U-Boot's enable_pcie_clock does them, and the PLL's outputs
// enabled only once it has locked and left bypass.
func TestPCIeClocks(t *testing.T) {
	ccm := &mmio.Recorder{Regs: newRegs()}
	pll := newPLL(3)
	ana := &mmio.Recorder{Regs: pll}
	ccm.Regs.(*regs).m[CCM_CBCMR] = 0x00022324 | CBCMR_PCIE_AXI_CLK_SEL // other selects untouched
	var c fakeClock
	if err := EnablePCIeClocks(ccm, ana, c.now, c.delay); err != nil {
		t.Fatal(err)
	}
	if v := pll.m[PMU_MISC1]; v != MISC1_LVDSCLK1_OBEN|MISC1_LVDS1_CLK_SEL_SATA {
		t.Errorf("PMU_MISC1 %#x: want LVDS1 output (bit 10) from sata_ref_100m (0xB), input off", v)
	}
	if v := ccm.Regs.(*regs).m[CCM_CBCMR]; v != 0x00022324 {
		t.Errorf("CBCMR %#x: want only PCIE_AXI_CLK_SEL cleared", v)
	}
	if v := ccm.Regs.(*regs).m[CCM_CCGR4]; v&3 != 3 {
		t.Errorf("CCGR4 %#x: pcie gate CG0 off", v)
	}
	want := uint32(0x00001001&^PLL_ENET_POWERDOWN | PLL_ENET_ENABLE | PLL_ENET_ENABLE_100M | PLL_ENET_ENABLE_125M)
	if v := pll.m[ANADIG_PLL_ENET]; v != want {
		t.Errorf("PLL_ENET %#08x, want %#08x (powered, enabled, not bypassed, 100M and 125M on, DIV_SELECT kept)", v, want)
	}
	// Outputs are enabled after lock and after bypass is cleared.
	locked, unbypassed := false, false
	for _, a := range ana.Log {
		if a.Off != ANADIG_PLL_ENET {
			continue
		}
		if !a.Write {
			locked = locked || a.Val&PLL_ENET_LOCK != 0
			continue
		}
		if a.Val&(PLL_ENET_ENABLE_100M|PLL_ENET_ENABLE_125M) != 0 && (!locked || !unbypassed) {
			t.Errorf("outputs enabled (%#08x) before lock (%v) and bypass off (%v)", a.Val, locked, unbypassed)
		}
		if a.Val&PLL_ENET_BYPASS == 0 {
			if !locked {
				t.Errorf("bypass cleared (%#08x) before lock", a.Val)
			}
			unbypassed = true
		}
	}
}

// TestPCIeClocksNoLock: a PLL that never locks is a typed error after
// PLLLockTimeout, with its outputs left off.
func TestPCIeClocksNoLock(t *testing.T) {
	pll := newPLL(-1)
	var c fakeClock
	err := EnablePCIeClocks(newRegs(), pll, c.now, c.delay)
	if !errors.Is(err, ErrENETPLLLock) {
		t.Fatalf("err %v, want ErrENETPLLLock", err)
	}
	if c.ns < int64(PLLLockTimeout) || c.ns > int64(2*PLLLockTimeout) {
		t.Errorf("gave up after %v, want about %v", time.Duration(c.ns), PLLLockTimeout)
	}
	if pll.m[ANADIG_PLL_ENET]&(PLL_ENET_ENABLE_100M|PLL_ENET_ENABLE_125M) != 0 {
		t.Errorf("outputs enabled without lock: %#08x", pll.m[ANADIG_PLL_ENET])
	}
}

func TestGPIOLine(t *testing.T) {
	for _, low := range []bool{true, false} {
		r := &mmio.Recorder{Regs: newRegs()}
		r.Regs.(*regs).m[GPIO_DR] = 0xFFFF_0000
		l := GPIOLine{Regs: r, Pin: 12, ActiveLow: low}
		l.Drive(true)
		dr := r.Regs.(*regs).m[GPIO_DR]
		if got := dr&(1<<12) != 0; got == low {
			t.Errorf("active low %v: asserted, DR %#x", low, dr)
		}
		if dr&^(1<<12) != 0xFFFF_0000&^(1<<12) || r.Regs.(*regs).m[GPIO_GDIR] != 1<<12 {
			t.Errorf("other pins touched: DR %#x GDIR %#x", dr, r.Regs.(*regs).m[GPIO_GDIR])
		}
		if r.Log[1].Off != GPIO_DR || !r.Log[1].Write {
			t.Errorf("direction set before the level: %v", r.Log)
		}
		l.Drive(false)
		if got := r.Regs.(*regs).m[GPIO_DR]&(1<<12) != 0; got != low {
			t.Errorf("active low %v: released, DR %#x", low, r.Regs.(*regs).m[GPIO_DR])
		}
	}
}

// TestPCIeBringUp runs the board's configuration against the root complex
// model: the clocks come up before the glue releases the PHY reference
// clock, a card behind the link enumerates, and a link that never trains
// is a *pcie.LinkError after the link timeout, not a hang.
func TestPCIeBringUp(t *testing.T) {
	for _, never := range []bool{false, true} {
		h := pcietest.New(pcietest.Options{SoC: pcie.IMX6Q, NeverTrains: never})
		f := pcietest.NewEndpoint(0x15B3, 0x1015, 0x020000)
		f.SetBAR(0, 32<<20, pcietest.Mem64Prefetch, newRegs())
		f.AddPCIe(0, 2, 1)
		h.Attach(0, f)
		pll := newPLL(2)
		gpr := h.GPR()
		clocksFirst := false
		gprRec := &gprWatch{Regs: gpr, onRefClk: func() { clocksFirst = pll.m[ANADIG_PLL_ENET]&PLL_ENET_ENABLE_125M != 0 }}
		cfg := PCIeConfig(h.DBI(), gprRec, newRegs(), pll, h.ConfigWindow(), h.MemWindow(), nil, h.Nanotime, h.Delay)
		rc, err := pcie.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t0 := h.Nanotime()
		err = rc.Start()
		if never {
			var le *pcie.LinkError
			if !errors.As(err, &le) || !errors.Is(err, pcie.ErrLinkDown) {
				t.Fatalf("never trains: err %v, want a *pcie.LinkError wrapping ErrLinkDown", err)
			}
			if el := time.Duration(h.Nanotime() - t0); el > 5*time.Second {
				t.Errorf("gave up after %v", el)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !clocksFirst {
			t.Errorf("GPR1 REF_CLK_EN set before the ENET PLL's 125 MHz output")
		}
		devs, err := rc.Enumerate()
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 1 || devs[0].Vendor != 0x15B3 || !devs[0].BARs[0].Assigned || devs[0].BARs[0].Size != 32<<20 {
			t.Fatalf("devices %+v", devs)
		}
		if v := h.Take(); len(v) != 0 {
			t.Errorf("model violations: %v", v)
		}
	}
}

// gprWatch calls onRefClk when GPR1's REF_CLK_EN is first set.
type gprWatch struct {
	mmio.Regs
	onRefClk func()
	done     bool
}

func (g *gprWatch) Write32(off, v uint32) {
	if off == 0x04 && v&(1<<16) != 0 && !g.done {
		g.done = true
		g.onRefClk()
	}
	g.Regs.Write32(off, v)
}
