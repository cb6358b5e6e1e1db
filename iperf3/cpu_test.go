package iperf3

import (
	"testing"
	"time"
)

// TestIdleCPUNeverOverOneCore: a firmware that never idles is 100% busy,
// not a hair more, however the clock readings around the samples fall
// (the QEMU test saw 100.00003% when busy time and wall time were read
// at different moments).
func TestIdleCPUNeverOverOneCore(t *testing.T) {
	src := IdleCPU{Boot: time.Now().Add(-time.Second), Idle: func() int64 { return 0 }}
	for i := 0; i < 1000; i++ {
		a := sampleCPU(src)
		b := sampleCPU(src)
		if total, _, _ := cpuUtil(a, b); total > 100 {
			t.Fatalf("sample %d: %.9f%% busy on one core", i, total)
		}
	}
}
