package connectx_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// TestDefaultTimeoutsAreLinux: with no timeouts configured the driver
// waits as Linux does (lib/tout.c: 120 s for the firmware to come ready,
// 60 s per command), measured on a fake clock the driver's Sleep
// advances by a second: firmware busy for 100 s and a command that takes
// 50 s are waited for, not failed.
func TestDefaultTimeoutsAreLinux(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1000, 0)
	var onSleep func()
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	m := connectxtest.New(connectxtest.Options{Mem: mem, InitPolls: 100})
	cfg := connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		Sleep: func() {
			mu.Lock()
			clock = clock.Add(time.Second)
			f := onSleep
			mu.Unlock()
			if f != nil {
				f()
			}
			runtime.Gosched()
		}}
	n, err := connectx.Open(cfg)
	if err != nil {
		t.Fatalf("Open with the firmware busy for 100 s: %v", err)
	}
	defer n.Close()
	mu.Lock()
	start := clock
	onSleep = func() {
		mu.Lock()
		late := clock.Sub(start) >= 50*time.Second
		mu.Unlock()
		if late {
			m.ReleaseCmd()
		}
	}
	mu.Unlock()
	m.SetFaults(connectxtest.Faults{HoldCmd: true})
	if err := n.Check(); err != nil {
		t.Fatalf("a command taking 50 s: %v", err)
	}
	for _, v := range m.Violations() {
		t.Errorf("model: %s", v)
	}
}
