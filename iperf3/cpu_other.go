//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package iperf3

import "time"

// DefaultCPU returns a source that reports no busy time: on this platform
// (e.g. GOOS=tamago) the caller is expected to supply one, such as IdleCPU.
func DefaultCPU() CPUSource {
	return CPUFunc(func() (time.Duration, time.Duration) { return 0, 0 })
}
