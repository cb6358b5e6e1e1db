//go:build tamago && arm

// Package idle is the baseline firmware's idle governor: the same policy
// and accounting as the tamanic boards' (board/internal/tickless in the
// main module, which Go's internal-package rule keeps out of this module),
// so that both firmwares' idle_ns mean the same thing.
//
// TamaGo's default governor spins in the scheduler while a timer is
// pending; this one arms the generic timer (CNTP) for the next deadline
// and waits in WFI, for waits of at least MinSleep, and sleeps in WFI
// until an interrupt when no timer is pending. Time spent here is idle.
package idle

import (
	"math"
	"runtime/goos"
	"sync/atomic"
	"time"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/arm/gic"
)

// Generic timer PPIs of the Cortex-A7: secure and non-secure PL1 physical
// timer (ARM Cortex-A7 MPCore TRM, 8.2 "Generic Timer interrupts").
const (
	IRQSecurePhysTimer    = 29
	IRQNonSecurePhysTimer = 30
)

// MinSleep is the shortest wait slept through in WFI; shorter ones spin.
const MinSleep = 10 * time.Microsecond

// Governor is one core's idle governor.
type Governor struct {
	cpu    *arm.CPU
	idleNs atomic.Int64
	armed  atomic.Bool
}

// Install makes a governor the runtime's idle hook on cpu. Until Serve,
// waits with a pending timer spin.
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
		cpu.WaitInterrupt()
	case !g.armed.Load() || pollUntil-t0 < int64(MinSleep):
		return
	default:
		// SetAlarm takes counter time, without TamaGo's offset.
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

// Serve tells g the interrupt goroutine takes the alarm (see Alarm), so
// timed waits may sleep in WFI.
func (g *Governor) Serve() { g.armed.Store(true) }

// Alarm disarms the timer if id is its PPI, and reports whether it was.
func (g *Governor) Alarm(id int) bool {
	if id != IRQSecurePhysTimer && id != IRQNonSecurePhysTimer {
		return false
	}
	g.cpu.SetAlarm(0)
	return true
}

// IdleNanoseconds returns the time spent idle.
func (g *Governor) IdleNanoseconds() int64 { return g.idleNs.Load() }
