package app

import (
	"time"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// runtimeNanotime is the runtime's monotonic clock (on TamaGo the board's
// runtime/goos.Nanotime), read without time.Now's wall clock.
//
//go:linkname runtimeNanotime runtime.nanotime
func runtimeNanotime() int64

// monoClock is gVisor's tcpip.Clock on a monotonic nanosecond clock: the
// board's or the runtime's.
//
// gVisor's own (tcpip.NewStdClock) computes every NowMonotonic as
// time.Since(base) plus an offset through MonotonicTime.Add, which goes
// through time.Unix, time.Time.Add and time.Time.Sub: on 32-bit ARM each
// time.Time (three words) is copied with runtime.duffcopy and time.Now
// reads the wall clock as well as the monotonic one. The TCP sender reads
// the clock several times per segment it sends or ACK it takes; this
// clock is one call of now.
type monoClock struct {
	now  func() int64
	base int64 // now() when the clock was made: readings start near 0
}

// newMonoClock returns a monoClock on now (nil: the runtime's clock)
// whose readings start at 0.
func newMonoClock(now func() int64) *monoClock {
	if now == nil {
		now = runtimeNanotime
	}
	return &monoClock{now: now, base: now()}
}

// monotonicTime converts nanoseconds to a tcpip.MonotonicTime, a struct
// of one int64 (gVisor pkg/tcpip/tcpip.go) with no exported constructor
// but its Add, which costs what this clock avoids. The layout is checked
// at compile time (size) and by TestMonoClockReadings (values).
func monotonicTime(ns int64) tcpip.MonotonicTime {
	return *(*tcpip.MonotonicTime)(unsafe.Pointer(&ns))
}

// The conversion above is valid only while MonotonicTime is one int64.
var _ [unsafe.Sizeof(tcpip.MonotonicTime{}) - 8]struct{}
var _ [8 - unsafe.Sizeof(tcpip.MonotonicTime{})]struct{}

// Now implements tcpip.Clock.
func (*monoClock) Now() time.Time { return time.Now() }

// NowMonotonic implements tcpip.Clock.
func (c *monoClock) NowMonotonic() tcpip.MonotonicTime { return monotonicTime(c.now() - c.base) }

// AfterFunc implements tcpip.Clock with the runtime's timers, as gVisor's
// standard clock does.
func (*monoClock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	return tcpip.NewStdTimer(time.AfterFunc(d, f))
}

var _ tcpip.Clock = (*monoClock)(nil)
