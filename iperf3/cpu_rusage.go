//go:build linux || darwin || freebsd || netbsd || openbsd

package iperf3

import (
	"syscall"
	"time"
)

// DefaultCPU returns the host default: this process's user and system CPU
// time from getrusage(2).
func DefaultCPU() CPUSource {
	return CPUFunc(func() (time.Duration, time.Duration) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, 0
		}
		return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	})
}
