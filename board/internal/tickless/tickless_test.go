package tickless

import (
	"math"
	"reflect"
	"testing"
)

// fakeTimer records what the governor does; each Wait advances the clock by
// step (the interrupt that ends it comes step later).
type fakeTimer struct {
	now   int64
	step  int64
	alarm int64
	log   []string
}

func (f *fakeTimer) Now() int64 { return f.now }
func (f *fakeTimer) SetAlarm(at int64) {
	f.alarm = at
	if at == 0 {
		f.log = append(f.log, "disarm")
	} else {
		f.log = append(f.log, "arm")
	}
}
func (f *fakeTimer) IsAlarm(id int) bool { return id == 27 }
func (f *fakeTimer) Wait() {
	if f.alarm != 0 && f.alarm > f.now {
		f.log = append(f.log, "wait-alarm")
	} else {
		f.log = append(f.log, "wait")
	}
	f.now += f.step
}

func TestGovernor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		serve     bool
		start     int64
		pollUntil int64
		log       []string
		idle      int64
		alarm     int64 // the deadline armed (0: never armed)
	}{
		{"no timer", false, 1000, 0, []string{"wait"}, 500, 0},
		{"endless sleep", true, 1000, math.MaxInt64, []string{"wait"}, 500, 0},
		{"before Serve spins", false, 1000, 1000 + int64(MinSleep)*10, nil, 0, 0},
		{"short wait spins", true, 1000, 1000 + int64(MinSleep) - 1, nil, 0, 0},
		{"sleeps to the deadline", true, 1000, 1000 + int64(MinSleep), []string{"arm", "wait-alarm", "disarm"}, 500, 1000 + int64(MinSleep)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTimer{now: tc.start, step: 500}
			var armed int64
			g := New(&recorder{fakeTimer: f, armed: &armed})
			if tc.serve {
				g.Serve()
			}
			g.Idle(tc.pollUntil)
			if !reflect.DeepEqual(f.log, tc.log) {
				t.Errorf("timer operations %v, want %v", f.log, tc.log)
			}
			if got := g.IdleNanoseconds(); got != tc.idle {
				t.Errorf("idle %d ns, want %d", got, tc.idle)
			}
			if armed != tc.alarm {
				t.Errorf("alarm armed for %d, want %d", armed, tc.alarm)
			}
			if f.alarm != 0 {
				t.Errorf("alarm left armed at %d", f.alarm)
			}
		})
	}
}

// recorder keeps the first non-zero deadline armed.
type recorder struct {
	*fakeTimer
	armed *int64
}

func (r *recorder) SetAlarm(at int64) {
	if at != 0 && *r.armed == 0 {
		*r.armed = at
	}
	r.fakeTimer.SetAlarm(at)
}

func TestAlarm(t *testing.T) {
	f := &fakeTimer{alarm: 5}
	g := New(f)
	if g.Alarm(118) {
		t.Fatal("ENET interrupt taken for the alarm")
	}
	if f.alarm != 5 {
		t.Fatal("another interrupt disarmed the alarm")
	}
	if !g.Alarm(27) || f.alarm != 0 {
		t.Fatalf("alarm interrupt not handled (alarm %d)", f.alarm)
	}
}

// TestWholePeriodMatchesFloatClock checks Nanotime's integer path against
// TamaGo's float64 one (arm.CPU.GetTime) for the counter rates of the
// boards and QEMU, and that other rates take the float path.
func TestWholePeriodMatchesFloatClock(t *testing.T) {
	for _, hz := range []float64{8e6, 62.5e6, 1e9} {
		m := 1e9 / hz
		p := wholePeriod(m)
		if p == 0 {
			t.Fatalf("%v Hz: period %v ns not taken as whole", hz, m)
		}
		for _, cnt := range []uint64{0, 1, 7, 1 << 20, 1 << 32, 1<<40 + 12345, 1 << 45} {
			const off = -123456789
			if got, want := int64(cnt)*p+off, int64(float64(cnt)*m)+off; got != want {
				t.Errorf("%v Hz, count %d: integer %d, float %d", hz, cnt, got, want)
			}
		}
	}
	for _, m := range []float64{1e9 / 24e6, 0, -16, 0.5, 1 << 40} {
		if p := wholePeriod(m); p != 0 {
			t.Errorf("period %v ns taken as whole (%d)", m, p)
		}
	}
}
