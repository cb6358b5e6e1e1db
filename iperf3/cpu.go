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
	busy := time.Since(c.Boot) - time.Duration(c.Idle())
	return max(busy, 0), 0
}

// cpuSample is one reading of a CPUSource with its wall-clock time.
type cpuSample struct {
	wall         time.Time
	user, system time.Duration
}

func sampleCPU(src CPUSource) cpuSample {
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
	// Each sample reads busy time a moment before the wall clock, so at
	// full load busy can exceed wall by that moment: report at most 100%.
	if total := user + system; total > 100 {
		user, system = 100*user/total, 100*system/total
	}
	return min(user+system, 100), user, system
}
