package pcie_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

func TestBringUpGen1ThenGen2OnEverySoC(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r := newRig(t, pcietest.Options{SoC: soc}, nil)
			if err := r.rc.Start(); err != nil {
				t.Fatal(err)
			}
			if !r.rc.LinkUp() || !r.h.LinkUp() {
				t.Fatal("link not up")
			}
			// The model trains at whatever the root port's Link
			// Capabilities allow when the LTSSM starts: Gen1 proves
			// the cap was written (DBI_RO_WR_EN) before training.
			if got := r.h.FirstGen(); got != 1 {
				t.Errorf("first trained at Gen%d, want Gen1", got)
			}
			if gen, w := r.rc.Link(); gen != 2 || w != 1 || r.h.Gen() != 2 {
				t.Errorf("link Gen%d x%d (model Gen%d), want Gen2 x1", gen, w, r.h.Gen())
			}
		})
	}
}

func TestMaxGen1StaysGen1(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) { c.MaxGen = 1 })
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if gen, _ := r.rc.Link(); gen != 1 {
		t.Fatalf("Gen%d", gen)
	}
}

func TestPartnerGen1(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D, PartnerGen: 1}, nil)
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if gen, _ := r.rc.Link(); gen != 1 {
		t.Fatalf("Gen%d with a Gen1 partner", gen)
	}
}

func TestLinkNeverTrains(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r := newRig(t, pcietest.Options{SoC: soc, NeverTrains: true}, func(c *pcie.Config) { c.LinkTimeout = 50 * time.Millisecond })
			err := r.rc.Start()
			var le *pcie.LinkError
			if !errors.As(err, &le) || !errors.Is(err, pcie.ErrLinkDown) {
				t.Fatalf("Start = %v, want a LinkError wrapping ErrLinkDown", err)
			}
			if le.Stage != "gen1" || le.Waited < 50*time.Millisecond || le.Waited > 60*time.Millisecond {
				t.Errorf("stage %q waited %v", le.Stage, le.Waited)
			}
			if !strings.Contains(err.Error(), soc.Name) {
				t.Errorf("error %q does not name the SoC", err)
			}
			devs, err := r.rc.Enumerate()
			if !errors.Is(err, pcie.ErrLinkDown) || devs != nil {
				t.Fatalf("Enumerate = %v, %v", devs, err)
			}
			if v := r.rc.ReadConfig32(pcie.BDF{Bus: 1}, 0); v != 0xFFFF_FFFF {
				t.Errorf("config read with the link down = %#x", v)
			}
			if err := r.rc.WriteConfig32(pcie.BDF{Bus: 1}, 4, 0); !errors.Is(err, pcie.ErrNoDevice) {
				t.Errorf("config write with the link down: %v", err)
			}
			if n := r.h.TLPs(); n != 0 {
				t.Errorf("%d TLPs left the root port with the link down", n)
			}
			// On the i.MX6 the PHY's RX overrides are pulsed after a
			// failed training (Linux imx6_pcie_reset_phy).
			w := r.h.PHYWrites()
			pulsed := len(w) == 2 && w[0] == (pcietest.PHYWrite{Addr: 0x1005, Val: 0x28}) && w[1] == (pcietest.PHYWrite{Addr: 0x1005, Val: 0})
			if pulsed != (soc.Glue != pcie.GlueIMX7D) {
				t.Errorf("PHY writes after the failure: %v", w)
			}
		})
	}
}

func TestSpeedChangeNeverCompletes(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q, SpeedChangeStuck: true}, nil)
	err := r.rc.Start()
	var le *pcie.LinkError
	if !errors.As(err, &le) || !errors.Is(err, pcie.ErrSpeedChange) || le.Stage != "speed change" {
		t.Fatalf("Start = %v", err)
	}
	// The i.MX7D never clears the bit and the driver does not wait for it.
	r7 := newRig(t, pcietest.Options{SoC: pcie.IMX7D, SpeedChangeStuck: true}, nil)
	if err := r7.rc.Start(); err != nil {
		t.Fatal(err)
	}
}

func TestPHYReferenceClock(t *testing.T) {
	for _, c := range []struct {
		hz        int
		mpll, ate uint16
	}{
		{100_000_000, 25<<2 | 1<<9, 1 << 2},
		{200_000_000, 25<<2 | 1<<9, 1<<2 | 1},
		{125_000_000, 0, 0},
	} {
		r := newRig(t, pcietest.Options{SoC: pcie.IMX6SX}, func(cf *pcie.Config) { cf.PHYRefClock = c.hz })
		if err := r.rc.Start(); err != nil {
			t.Fatal(err)
		}
		if m, a := r.h.PHYReg(0x11), r.h.PHYReg(0x10); m != c.mpll || a != c.ate {
			t.Errorf("%d Hz: MPLL_OVRD_IN_LO %#x ATEOVRD %#x, want %#x %#x", c.hz, m, a, c.mpll, c.ate)
		}
	}
	stuck := newRig(t, pcietest.Options{SoC: pcie.IMX6Q, PHYStuck: true}, func(cf *pcie.Config) { cf.PHYRefClock = 100_000_000 })
	if err := stuck.rc.Start(); !errors.Is(err, pcie.ErrPHY) {
		t.Fatalf("PHY that never acknowledges: %v", err)
	}
}

func TestPLLNeverLocks(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D, PLLNeverLocks: true}, nil)
	if err := r.rc.Start(); !errors.Is(err, pcie.ErrPLLLock) {
		t.Fatalf("Start = %v, want ErrPLLLock", err)
	}
}

func TestClocksAndPERSTHooks(t *testing.T) {
	var seq []string
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) {
		c.Clocks = func() error { seq = append(seq, "clocks"); return nil }
		c.PERST = func(a bool) {
			if a {
				seq = append(seq, "perst-assert")
			} else {
				seq = append(seq, "perst-release")
			}
		}
	})
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seq, ","); got != "perst-assert,clocks,perst-release" {
		t.Errorf("sequence %s", got)
	}
	bad := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) {
		c.Clocks = func() error { return errors.New("PLL") }
	})
	if err := bad.rc.Start(); err == nil || !strings.Contains(err.Error(), "PLL") {
		t.Fatalf("clock failure: %v", err)
	}
}

func TestRestartAfterStop(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	r.rc.Stop()
	if r.rc.LinkUp() || r.h.LinkUp() {
		t.Fatal("link still up after Stop")
	}
	// A link left up by a boot loader is forced to Detect first.
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D})
	good := h.Config()
	cases := map[string]func(*pcie.Config){
		"glue":      func(c *pcie.Config) { c.SoC.Glue = 0 },
		"dbi":       func(c *pcie.Config) { c.DBI = nil },
		"src":       func(c *pcie.Config) { c.SRC = nil },
		"clock":     func(c *pcie.Config) { c.Nanotime = nil },
		"viewports": func(c *pcie.Config) { c.SoC.Viewports = 1 },
		"window":    func(c *pcie.Config) { c.SoC.BusMemSize = 1 },
		"4GiB":      func(c *pcie.Config) { c.SoC.BusMemBase = 0xF800_0000 },
		"gen":       func(c *pcie.Config) { c.MaxGen = 3 },
		"refclk":    func(c *pcie.Config) { c.PHYRefClock = 50_000_000 },
	}
	for name, mod := range cases {
		c := good
		mod(&c)
		if _, err := pcie.New(c); !errors.Is(err, pcie.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if pcie.GlueIMX6SX.String() != "i.MX6SX" || pcie.Glue(9).String() != "Glue(9)" {
		t.Error("Glue names")
	}
}
