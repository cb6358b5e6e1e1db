//go:build tamago && arm

package tickless

import (
	"runtime/goos"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/arm/gic"
)

// Generic timer interrupts (PPIs) of the Cortex-A7: secure and non-secure
// PL1 physical timer (ARM Cortex-A7 MPCore TRM, 8.2 "Generic Timer
// interrupts"). TamaGo runs in the secure world; both are enabled so the
// alarm wakes the core whichever one the CNTP registers drive.
const (
	IRQSecurePhysTimer    = 29
	IRQNonSecurePhysTimer = 30
)

// GenericTimer is the Timer of an ARMv7 core with the generic timer
// (Cortex-A7): its PL1 physical timer, CNTP.
type GenericTimer struct{ CPU *arm.CPU }

// Now implements Timer.
func (g GenericTimer) Now() int64 { return Nanotime(g.CPU) }

// Nanotime is cpu.GetTime (TamaGo's runtime clock: the generic timer's
// CNTPCT times TimerMultiplier, plus TimerOffset) in integer arithmetic
// when the counter's period is a whole number of nanoseconds, as it is on
// the i.MX6UL/ULL and i.MX7D (8 MHz system counter: 125 ns) and under
// QEMU (62.5 MHz: 16 ns). GetTime converts through float64, and on
// GOARM=7 the conversion back to int64 is a software routine
// (runtime._d2v): about 110 instructions a reading against a handful.
// The two agree exactly while the count times the period fits float64's
// 53 bits (104 days at 8 MHz); past that GetTime rounds and this does not.
func Nanotime(cpu *arm.CPU) int64 {
	if p := wholePeriod(cpu.TimerMultiplier); p != 0 {
		return int64(cpu.Counter())*p + cpu.TimerOffset
	}
	return cpu.GetTime()
}

// SetAlarm implements Timer. arm.CPU.SetAlarm takes counter time without
// TamaGo's offset.
func (g GenericTimer) SetAlarm(at int64) {
	if at == 0 {
		g.CPU.SetAlarm(0)
		return
	}
	g.CPU.SetAlarm(at - g.CPU.TimerOffset)
}

// IsAlarm implements Timer.
func (GenericTimer) IsAlarm(id int) bool {
	return id == IRQSecurePhysTimer || id == IRQNonSecurePhysTimer
}

// Wait implements Timer.
func (g GenericTimer) Wait() { g.CPU.WaitInterrupt() }

// Install makes a governor on cpu's generic timer the runtime's idle
// governor.
func Install(cpu *arm.CPU) *Governor { return InstallTimer(GenericTimer{CPU: cpu}) }

// InstallTimer makes a governor on t the runtime's idle governor.
func InstallTimer(t Timer) *Governor {
	g := New(t)
	goos.Idle = g.Idle
	return g
}

// EnableTimerInterrupts enables the generic timer's PPIs in the GIC.
func EnableTimerInterrupts(ic *gic.GIC) {
	ic.EnableInterrupt(IRQSecurePhysTimer, true)
	ic.EnableInterrupt(IRQNonSecurePhysTimer, true)
}
