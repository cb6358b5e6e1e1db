// Package tickless is the idle governor the tamanic boards share: it
// replaces TamaGo's, arms a per-core timer for the next deadline and waits
// in WFI, and accounts idle time.
//
// TamaGo's default governor (arm.CPU.DefaultIdleGovernor) enters WFI only
// when no timer is pending; otherwise it returns at once and the scheduler
// spins reading the counter until the timer is due. A TCP connection
// always has a timer pending, so during a transfer the core never slept:
// PC sampling under QEMU put about 40% of the busy time of a transfer in
// that loop (arm.read_cntpct and the scheduler). This governor arms the
// board's timer for the next deadline and waits in WFI: the alarm or any
// other interrupt wakes it.
//
// The timer is the one thing that differs between boards: the Cortex-A7
// boards use the generic timer's CNTP (NewGenericTimer), the Cortex-A9,
// which has none, its global timer's comparator (board/sabrelite). The
// logic here is the same for both.
package tickless

import (
	"math"
	"sync/atomic"
	"time"
)

// MinSleep is the shortest wait the governor sleeps through in WFI;
// shorter ones are spun.
const MinSleep = 10 * time.Microsecond

// Timer is what the governor needs of a core's timer.
type Timer interface {
	// Now returns the runtime's clock (goos.Nanotime), in nanoseconds.
	Now() int64
	// SetAlarm arms the timer's interrupt for the runtime time at; 0
	// disarms it.
	SetAlarm(at int64)
	// IsAlarm reports whether interrupt id is the timer's.
	IsAlarm(id int) bool
	// Wait waits for an interrupt (WFI).
	Wait()
}

// Governor is one core's idle governor.
type Governor struct {
	t        Timer
	idleNs   atomic.Int64
	tickless atomic.Bool
}

// New returns a governor on t. Until Serve is called, waits with a pending
// timer are spun as TamaGo does. Install (TamaGo only) makes it the
// runtime's.
func New(t Timer) *Governor { return &Governor{t: t} }

// Idle is the runtime's idle hook (goos.Idle): pollUntil is the runtime
// time of the next timer, 0 or math.MaxInt64 when none is pending.
func (g *Governor) Idle(pollUntil int64) {
	t := g.t
	t0 := t.Now()
	switch {
	case pollUntil == 0 || pollUntil == math.MaxInt64:
		// No timer pending (0), or only the interrupt goroutine's
		// endless sleep: only an interrupt can make work.
		t.Wait()
	case !g.tickless.Load() || pollUntil-t0 < int64(MinSleep):
		// Spin in the scheduler: no alarm interrupt yet, or too short
		// a wait to sleep through.
		return
	default:
		t.SetAlarm(pollUntil)
		t.Wait()
		t.SetAlarm(0)
	}
	g.idleNs.Add(t.Now() - t0)
}

// Serve tells g that the interrupt goroutine now takes the alarm's
// interrupt (see Alarm), so waits may sleep in WFI.
func (g *Governor) Serve() { g.tickless.Store(true) }

// Alarm handles the timer interrupt in the interrupt goroutine: the alarm
// woke the core, which is all it is for. It is disarmed (the line is
// level). It reports whether id was the alarm.
func (g *Governor) Alarm(id int) bool {
	if !g.t.IsAlarm(id) {
		return false
	}
	g.t.SetAlarm(0)
	return true
}

// IdleNanoseconds returns the time spent in the governor.
func (g *Governor) IdleNanoseconds() int64 { return g.idleNs.Load() }

// wholePeriod returns the counter period m (nanoseconds per tick, TamaGo's
// TimerMultiplier) as an integer when it is a whole number of nanoseconds
// (and at most 2^31-1), else 0: Nanotime's integer path.
func wholePeriod(m float64) int64 {
	if p := int32(m); p > 0 && float64(p) == m {
		return int64(p)
	}
	return 0
}
