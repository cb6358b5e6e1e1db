package sabrelite

import (
	"math/bits"

	"github.com/tamanic/tamanic/internal/mmio"
)

// Cortex-A9 global timer registers, at PERIPHBASE+0x200 (ARM Cortex-A9
// MPCore TRM r4p1, 4.4 "Global timer registers", table 4-3).
const (
	GT_COUNTER_LO = 0x00
	GT_COUNTER_HI = 0x04
	GT_CONTROL    = 0x08
	GT_INT_STATUS = 0x0C
	GT_COMP_LO    = 0x10
	GT_COMP_HI    = 0x14

	// GT_CONTROL fields (4.4.3 "Global Timer Control Register").
	GT_CONTROL_TIMER_EN = 1 << 0
	GT_CONTROL_COMP_EN  = 1 << 1
	GT_CONTROL_IRQ_EN   = 1 << 2
	GT_CONTROL_PRESCALE = 0xFF << 8

	// GlobalTimerIRQ is the global timer's PPI (ID27, TRM 3.3
	// "Interrupt distributor interrupt sources").
	GlobalTimerIRQ = 27
)

// GlobalTimer is the Cortex-A9 global timer: a 64-bit up-counter shared
// by the cores, clocked by PERIPHCLK/(prescaler+1), with a comparator and
// interrupt banked per core. It is the board's clock (the A9 has no
// generic timer) and the tickless governor's alarm.
type GlobalTimer struct {
	Regs mmio.Regs
	// Hz is the counter frequency.
	Hz uint64
	// 1e9/Hz in 64.64 fixed point, the fraction rounded up: exact to
	// the nanosecond over years (a 40.24 factor drifted 6 µs an hour at
	// 396 MHz).
	multInt, multFrac uint64
	wfi               func()
}

// NewGlobalTimer returns the timer at regs counting at hz; wfi waits for
// an interrupt. It starts the counter (prescaler 0) if nothing has.
func NewGlobalTimer(regs mmio.Regs, hz uint64, wfi func()) *GlobalTimer {
	t := &GlobalTimer{Regs: regs, Hz: hz, multInt: 1e9 / hz, wfi: wfi}
	if r := uint64(1e9) % hz; r != 0 {
		q, rem := bits.Div64(r, 0, hz)
		if rem != 0 {
			q++
		}
		t.multFrac = q
	}
	if c := regs.Read32(GT_CONTROL); c&GT_CONTROL_TIMER_EN == 0 {
		regs.Write32(GT_CONTROL, GT_CONTROL_TIMER_EN)
	}
	return t
}

// Counter returns the 64-bit count, read high-low-high so that a carry
// between the halves is never seen torn (TRM 4.4.1).
func (t *GlobalTimer) Counter() uint64 {
	for {
		hi := t.Regs.Read32(GT_COUNTER_HI)
		lo := t.Regs.Read32(GT_COUNTER_LO)
		if t.Regs.Read32(GT_COUNTER_HI) == hi {
			return uint64(hi)<<32 | uint64(lo)
		}
	}
}

// ticksToNs converts a count to nanoseconds.
func (t *GlobalTimer) ticksToNs(c uint64) int64 {
	hi, _ := bits.Mul64(c, t.multFrac)
	return int64(c*t.multInt + hi)
}

// nsToTicks converts nanoseconds (non-negative) to a count, rounding up.
func (t *GlobalTimer) nsToTicks(ns int64) uint64 {
	hi, lo := bits.Mul64(uint64(ns), t.Hz)
	lo, c := bits.Add64(lo, 1e9-1, 0)
	hi += c
	if hi >= 1e9 {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, 1e9)
	return q
}

// Now returns the time since the counter started, in nanoseconds.
func (t *GlobalTimer) Now() int64 { return t.ticksToNs(t.Counter()) }

// SetAlarm arms this core's comparator for time at (Now's clock) with its
// interrupt; 0 disarms it. A deadline already past fires at once (the
// comparator matches counter >= compare from r2p0).
func (t *GlobalTimer) SetAlarm(at int64) {
	c := t.Regs.Read32(GT_CONTROL) &^ (GT_CONTROL_COMP_EN | GT_CONTROL_IRQ_EN)
	t.Regs.Write32(GT_CONTROL, c)
	t.Regs.Write32(GT_INT_STATUS, 1) // the event flag is write-one-to-clear
	if at <= 0 {
		return
	}
	cmp := t.nsToTicks(at)
	t.Regs.Write32(GT_COMP_LO, uint32(cmp))
	t.Regs.Write32(GT_COMP_HI, uint32(cmp>>32))
	t.Regs.Write32(GT_CONTROL, c|GT_CONTROL_COMP_EN|GT_CONTROL_IRQ_EN)
}

// IsAlarm reports whether id is the global timer's interrupt.
func (*GlobalTimer) IsAlarm(id int) bool { return id == GlobalTimerIRQ }

// Wait waits for an interrupt.
func (t *GlobalTimer) Wait() { t.wfi() }
