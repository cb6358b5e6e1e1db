package iperf3

import (
	"testing"
	"time"
)

// TestCPUUtilAtMost100: busy time is read a moment before the wall clock
// in each sample, so at full load the busy delta can exceed the wall delta
// by that moment's jitter; the report must still say at most 100%
// (the QEMU test saw 100.00004% for iperf3 -R).
func TestCPUUtilAtMost100(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuSample{wall: t0, user: time.Second}
	b := cpuSample{wall: t0.Add(2 * time.Second), user: 3*time.Second + 80*time.Nanosecond, system: 0}
	total, user, system := cpuUtil(a, b)
	if total > 100 || user > 100 || system != 0 {
		t.Errorf("cpuUtil = %v total, %v user, %v system; want at most 100%%", total, user, system)
	}
	if total < 99.99 {
		t.Errorf("cpuUtil total %v, want ~100", total)
	}
	c := cpuSample{wall: t0.Add(2 * time.Second), user: 2 * time.Second, system: 2 * time.Second}
	if total, _, _ := cpuUtil(a, c); total > 100 {
		t.Errorf("user+system over the wall time: total %v", total)
	}
	if total, _, _ := cpuUtil(a, cpuSample{wall: t0.Add(2 * time.Second), user: 2 * time.Second}); total != 50 {
		t.Errorf("half busy: %v", total)
	}
}
