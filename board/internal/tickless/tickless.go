//go:build tamago && arm

// Package tickless is the idle governor the tamanic boards share: it
// replaces TamaGo's, arms the generic timer for the next deadline and waits
// in WFI, and accounts idle time.
//
// TamaGo's default governor (arm.CPU.DefaultIdleGovernor) enters WFI only
// when no timer is pending; otherwise it returns at once and the scheduler
// spins reading the counter until the timer is due. A TCP connection
// always has a timer pending, so during a transfer the core never slept:
// PC sampling under QEMU put about 40% of the busy time of a transfer in
// that loop (arm.read_cntpct and the scheduler). This governor arms the
// generic timer (CNTP) for the next deadline and waits in WFI: the alarm
// or any other interrupt wakes it.
package tickless

import (
	"math"
	"runtime/goos"
	"sync/atomic"
	"time"

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

// MinSleep is the shortest wait the governor sleeps through in WFI;
// shorter ones are spun.
const MinSleep = 10 * time.Microsecond

// Governor is one core's idle governor.
type Governor struct {
	cpu      *arm.CPU
	idleNs   atomic.Int64
	tickless atomic.Bool
}

// Install makes g the runtime's idle governor on cpu. Until Serve is
// called, waits with a pending timer are spun as TamaGo does.
func Install(cpu *arm.CPU) *Governor {
	g := &Governor{cpu: cpu}
	goos.Idle = g.idle
	return g
}

func (g *Governor) idle(pollUntil int64) {
	cpu := g.cpu
	t0 := cpu.GetTime()
	switch {
	case pollUntil == 0 || pollUntil == math.MaxInt64:
		// No timer pending (0), or only the interrupt goroutine's
		// endless sleep: only an interrupt can make work.
		cpu.WaitInterrupt()
	case !g.tickless.Load() || pollUntil-t0 < int64(MinSleep):
		// Spin in the scheduler: no alarm interrupt yet, or too short
		// a wait to sleep through.
		return
	default:
		// SetAlarm takes counter time without TamaGo's offset.
		cpu.SetAlarm(pollUntil - cpu.TimerOffset)
		cpu.WaitInterrupt()
		cpu.SetAlarm(0)
	}
	g.idleNs.Add(cpu.GetTime() - t0)
}

// EnableTimerInterrupts enables the alarm's PPIs in the GIC.
func EnableTimerInterrupts(ic *gic.GIC) {
	ic.EnableInterrupt(IRQSecurePhysTimer, true)
	ic.EnableInterrupt(IRQNonSecurePhysTimer, true)
}

// Serve tells g that the interrupt goroutine now takes the alarm's
// interrupt (see Alarm), so waits may sleep in WFI.
func (g *Governor) Serve() { g.tickless.Store(true) }

// Alarm handles the timer PPI in the interrupt goroutine: the alarm woke
// the core, which is all it is for. It is disarmed (the line is level).
// It reports whether id was the alarm.
func (g *Governor) Alarm(id int) bool {
	if id != IRQSecurePhysTimer && id != IRQNonSecurePhysTimer {
		return false
	}
	g.cpu.SetAlarm(0)
	return true
}

// IdleNanoseconds returns the time spent in the governor.
func (g *Governor) IdleNanoseconds() int64 { return g.idleNs.Load() }
