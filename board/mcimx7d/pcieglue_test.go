package mcimx7d

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// socSim is the i.MX7D blocks the PCIe glue touches, as the reference
// manual and Linux describe them (the sources are cited in pcieglue.go):
// ANATOP's PLL_ENET (powered down and unlocked out of reset, locking 100 µs
// after power-up; SET/CLR aliases) and vdd1p0d; the CCM's PCIe clock roots
// and CCGR gate (SET alias); the GPC's power-up request, which completes
// (clears) only for a domain mapped to the A7 whose supply is on; GPIO1
// driving a 74HC595 (shift on SHCP's rising edge, latch on STCP's). It
// records as violations what the silicon would not do as asked.
type socSim struct {
	ns                             int64
	anatop, ccm, gpc, gpio, iomuxc map[uint32]uint32
	lockAt                         int64
	pupAt                          int64
	neverLock, pupStuck            bool
	shift                          uint32
	latched                        []uint32
	powered                        bool
	viol                           []string
}

func newSocSim() *socSim {
	// The three 74HC595 pads start in a function other than GPIO (ALT5,
	// a value the mux reads back; what the reset value is was not
	// checked): only an IOMUXC write to ALT0 makes them GPIO1 pins.
	return &socSim{anatop: map[uint32]uint32{anatopPLLENET: pllENETPowerDown}, ccm: map[uint32]uint32{},
		gpc: map[uint32]uint32{}, gpio: map[uint32]uint32{}, lockAt: -1, pupAt: -1,
		iomuxc: map[uint32]uint32{muxGPIO1IO09: 5, muxGPIO1IO12: 5, muxGPIO1IO13: 5}}
}

func (s *socSim) violate(f string, a ...any) { s.viol = append(s.viol, fmt.Sprintf(f, a...)) }

type simRegs struct {
	r func(uint32) uint32
	w func(uint32, uint32)
}

func (r simRegs) Read32(off uint32) uint32 { return r.r(off) }
func (r simRegs) Write32(off, v uint32)    { r.w(off, v) }

func (s *socSim) glue() pcieGlue {
	return pcieGlue{
		anatop: simRegs{s.anatopRead, s.anatopWrite},
		ccm:    simRegs{func(o uint32) uint32 { return s.ccm[o] }, s.ccmWrite},
		gpc:    simRegs{s.gpcRead, s.gpcWrite},
		gpio1:  simRegs{func(o uint32) uint32 { return s.gpio[o] }, s.gpioWrite},
		iomuxc: simRegs{func(o uint32) uint32 { return s.iomuxc[o] }, func(o, v uint32) { s.iomuxc[o] = v }},
		now:    func() int64 { return s.ns },
		delay:  func(d time.Duration) { s.ns += int64(d) },
	}
}

func (s *socSim) anatopRead(off uint32) uint32 {
	v := s.anatop[off]
	if off == anatopPLLENET {
		v &^= pllLock
		if !s.neverLock && s.lockAt >= 0 && s.ns >= s.lockAt {
			v |= pllLock
		}
	}
	return v
}

func (s *socSim) anatopWrite(off, v uint32) {
	base, op := off&^0xF, off&0xF
	switch op {
	case anatopSet:
		s.anatop[base] |= v
	case anatopClr:
		s.anatop[base] &^= v
	default:
		s.anatop[off] = v
	}
	if base == anatopPLLENET {
		if s.anatop[base]&pllENETPowerDown != 0 {
			s.lockAt = -1
		} else if s.lockAt < 0 {
			s.lockAt = s.ns + int64(100*time.Microsecond)
		}
	}
}

func (s *socSim) ldoOn() bool {
	v := s.anatop[anatopReg1P0D]
	return v&reg1P0DEnable != 0 && v&reg1P0DTrgMask == reg1P0D1V0
}

func (s *socSim) ccmWrite(off, v uint32) {
	switch off {
	case ccmCCGRPCIe + ccmCCGRSet:
		for _, r := range []uint32{ccmTargetRootPCIe, ccmTargetRootPCIePH} {
			if s.ccm[r]&targetEnable == 0 {
				s.violate("CCGR gate opened before root %#x is enabled (parents first)", r)
			}
		}
		s.ccm[ccmCCGRPCIe] |= v
	default:
		s.ccm[off] = v
	}
}

func (s *socSim) gpcRead(off uint32) uint32 {
	if off == gpcPUPReq && s.pupAt >= 0 && !s.pupStuck && s.ns >= s.pupAt {
		s.gpc[off] &^= gpcPCIePHYReq
		s.pupAt, s.powered = -1, true
	}
	return s.gpc[off]
}

func (s *socSim) gpcWrite(off, v uint32) {
	if off == gpcPUPReq && v&gpcPCIePHYReq != 0 && s.gpc[off]&gpcPCIePHYReq == 0 {
		switch {
		case s.gpc[gpcPGCCPUMapping]&gpcPCIePHYMapA7 == 0:
			s.violate("power-up requested for a domain not mapped to the A7: the request never completes")
			s.pupStuck = true
		case !s.ldoOn():
			s.violate("power-up requested with vdd1p0d off or not at 1.0 V")
		}
		s.pupAt = s.ns + int64(50*time.Microsecond)
	}
	s.gpc[off] = v
}

func (s *socSim) gpioWrite(off, v uint32) {
	old := s.gpio[gpioDR]
	s.gpio[off] = v
	if off != gpioDR {
		return
	}
	if s.gpio[gpioGDIR]&ioxPins != ioxPins {
		s.violate("GPIO1 DR written with the 74HC595 pins not outputs")
	}
	for _, mux := range []uint32{muxGPIO1IO09, muxGPIO1IO12, muxGPIO1IO13} {
		if s.iomuxc[mux]&7 != 0 {
			// A pad in another function does not follow GPIO1's DR
			// (imx7d-pinfunc.h: GPIO1_IOnn is ALT0).
			s.violate("GPIO1 DR written with IOMUXC mux %#x = %#x: the pad is not a GPIO, the 74HC595 sees nothing", mux, s.iomuxc[mux])
			return
		}
	}
	rising := v &^ old
	if rising&ioxSHCP != 0 {
		s.shift = s.shift<<1 | v>>9&1
	}
	if rising&ioxSTCP != 0 {
		s.latched = append(s.latched, s.shift&0xFF)
	}
}

// TestPCIeGlueBringsUpClocksAndPower: from the SoC's reset state (ENET PLL
// powered down) and from QEMU 7.2's (PLL locked, outputs on), the glue
// powers the PHY domain, starts the PLL's outputs, the two clock roots and
// their gate, with nothing out of order.
func TestPCIeGlueBringsUpClocksAndPower(t *testing.T) {
	for _, qemu := range []bool{false, true} {
		s := newSocSim()
		if qemu {
			s.anatop[anatopPLLENET] = 0x1FC0
			s.lockAt = 0
		}
		start := s.ns
		if err := s.glue().clocks(); err != nil {
			t.Fatalf("qemu=%v: %v", qemu, err)
		}
		if len(s.viol) != 0 {
			t.Errorf("qemu=%v: %v", qemu, s.viol)
		}
		pll := s.anatopRead(anatopPLLENET)
		switch {
		case !s.powered || !s.ldoOn():
			t.Errorf("qemu=%v: PHY domain powered %v, vdd1p0d %#x", qemu, s.powered, s.anatop[anatopReg1P0D])
		case s.gpc[gpcPGCCPUMapping]&gpcPCIePHYMapA7 != 0:
			t.Errorf("qemu=%v: domain left mapped", qemu)
		case pll&(pllENET250M|pllENET100M|pllLock) != pllENET250M|pllENET100M|pllLock || pll&pllENETPowerDown != 0:
			t.Errorf("qemu=%v: PLL_ENET %#08x", qemu, pll)
		case s.ccm[ccmTargetRootPCIe] != 1<<28|1<<24 || s.ccm[ccmTargetRootPCIePH] != 1<<28|1<<24:
			t.Errorf("qemu=%v: roots %#08x %#08x", qemu, s.ccm[ccmTargetRootPCIe], s.ccm[ccmTargetRootPCIePH])
		case s.ccm[ccmCCGRPCIe]&3 != 3:
			t.Errorf("qemu=%v: CCGR %#x", qemu, s.ccm[ccmCCGRPCIe])
		}
		if d := time.Duration(s.ns - start); d > 5*time.Millisecond {
			t.Errorf("qemu=%v: took %v", qemu, d)
		}
	}
}

// A domain that never powers up and a PLL that never locks are bounded,
// reported errors.
func TestPCIeGlueFailuresAreBounded(t *testing.T) {
	s := newSocSim()
	s.pupStuck = true
	if err := s.glue().clocks(); !errors.Is(err, ErrPCIePower) || s.ns > int64(2*time.Millisecond) {
		t.Errorf("stuck power-up: %v after %v", err, time.Duration(s.ns))
	}
	if s.gpc[gpcPGCCPUMapping]&gpcPCIePHYMapA7 != 0 {
		t.Error("domain left mapped after the failure")
	}
	s = newSocSim()
	s.neverLock = true
	if err := s.glue().clocks(); !errors.Is(err, ErrPCIeClock) || s.ns > int64(12*time.Millisecond) {
		t.Errorf("PLL never locks: %v after %v", err, time.Duration(s.ns))
	}
	if s.ccm[ccmCCGRPCIe] != 0 {
		t.Error("gate opened on a PLL that never locked")
	}
}

// PERST# is Q1 of the 74HC595: asserting latches 0xFC, releasing 0xFE;
// the other outputs keep U-Boot's state (ENET_RST_B, Q5, high).
func TestPCIeGluePERST(t *testing.T) {
	s := newSocSim()
	g := s.glue()
	g.perst(true)
	g.perst(false)
	if len(s.viol) != 0 {
		t.Fatal(s.viol)
	}
	if len(s.latched) != 2 || s.latched[0] != 0xFC || s.latched[1] != 0xFE {
		t.Fatalf("74HC595 outputs latched %#x", s.latched)
	}
}
