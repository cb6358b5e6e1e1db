package app

import (
	"testing"
	"time"
)

// TestMonoClockReadings checks monotonicTime against gVisor's own
// arithmetic: were MonotonicTime's layout to change, Sub and Add would
// disagree with the nanoseconds put in.
func TestMonoClockReadings(t *testing.T) {
	a, b := monotonicTime(1_000), monotonicTime(3_500_000_000)
	if d := b.Sub(a); d != 3_500_000_000-1_000 {
		t.Fatalf("Sub of readings 1000 ns and 3.5 s: %v", d)
	}
	if got := a.Add(3_499_999_000); got != b {
		t.Fatalf("1000 ns + 3499999000 ns = %v, want %v", got, b)
	}
	if !a.Before(b) || b.Before(a) {
		t.Fatal("Before disagrees with the nanoseconds")
	}
	fake := int64(5_000)
	fc := newMonoClock(func() int64 { return fake })
	fake += 1_234_567
	if d := fc.NowMonotonic().Sub(monotonicTime(0)); d != 1_234_567 {
		t.Fatalf("board clock advanced 1234567 ns from the clock's base, reading %v", d)
	}
	c := newMonoClock(nil)
	r0 := c.NowMonotonic()
	time.Sleep(20 * time.Millisecond)
	r1 := c.NowMonotonic()
	if d := r1.Sub(r0); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("20 ms sleep measured as %v", d)
	}
	if r0.Sub(monotonicTime(0)) < 0 {
		t.Fatalf("first reading %v before the clock's base", r0)
	}
	fired := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc never fired")
	}
	tm := c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported it already fired")
	}
}
