package iperf3

import "time"

// CPUSource reports the CPU time the server's host has spent busy, split
// into user and system time where the platform knows the difference. The
// server samples it when a test starts and when it ends and reports
// (busy delta) / (wall-clock delta) in the results, which the client
// prints as the remote CPU utilisation. Implementations must be safe for
// concurrent use.
type CPUSource interface {
	CPUTime() (user, system time.Duration)
}

// CPUFunc adapts a function to CPUSource.
type CPUFunc func() (user, system time.Duration)

// CPUTime implements CPUSource.
func (f CPUFunc) CPUTime() (user, system time.Duration) { return f() }

// IdleCPU derives busy time from an idle counter: busy is the wall-clock
// time since boot minus idle. A bare-metal firmware has no user/kernel
// split, so all busy time is reported as user time.
type IdleCPU struct {
	Boot time.Time    // when the idle counter started
	Idle func() int64 // nanoseconds spent idle since Boot
}

// CPUTime implements CPUSource.
func (c IdleCPU) CPUTime() (user, system time.Duration) {
	_, user, system = c.cpuTimeAt()
	return user, system
}

// cpuTimeAt reads the idle counter and the clock together, so that the
// wall time a utilisation is computed over is the one busy time was
// derived from: a single core is never more than 100% busy.
func (c IdleCPU) cpuTimeAt() (now time.Time, user, system time.Duration) {
	idle := time.Duration(c.Idle())
	now = time.Now()
	return now, max(now.Sub(c.Boot)-idle, 0), 0
}

// timedCPU is a CPUSource that reads its own clock with its CPU time.
type timedCPU interface {
	cpuTimeAt() (now time.Time, user, system time.Duration)
}

// cpuSample is one reading of a CPUSource with its wall-clock time.
type cpuSample struct {
	wall         time.Time
	user, system time.Duration
}

func sampleCPU(src CPUSource) cpuSample {
	if t, ok := src.(timedCPU); ok {
		now, u, s := t.cpuTimeAt()
		return cpuSample{wall: now, user: u, system: s}
	}
	u, s := src.CPUTime()
	return cpuSample{wall: time.Now(), user: u, system: s}
}

// cpuUtil returns total, user and system utilisation in percent between
// two samples.
func cpuUtil(a, b cpuSample) (total, user, system float64) {
	wall := b.wall.Sub(a.wall)
	if wall <= 0 {
		return 0, 0, 0
	}
	pct := func(d time.Duration) float64 { return 100 * float64(max(d, 0)) / float64(wall) }
	user, system = pct(b.user-a.user), pct(b.system-a.system)
	return user + system, user, system
}
