package cxnic

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// TestBringUpCommandsWaitAsLinux: the firmwares' CmdTimeout (5 s) bounds
// the data path's commands only. A bring-up command the card takes 8 s
// over (ENABLE_HCA, held) is waited for, as Linux waits 60 s; after
// bring-up a command the card never answers times out after CmdTimeout.
// Time is a fake clock that the driver's Sleep advances by 100 ms.
func TestBringUpCommandsWaitAsLinux(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1000, 0)
	var release time.Time // the held command completes at this time (zero: never)
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	m := connectxtest.New(connectxtest.Options{Mem: mem})
	m.SetFaults(connectxtest.Faults{HoldCmd: true})
	release = clock.Add(8 * time.Second)
	cfg := connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem, CmdTimeout: CmdTimeout,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		Sleep: func() {
			mu.Lock()
			clock = clock.Add(100 * time.Millisecond)
			due := !release.IsZero() && !clock.Before(release)
			if due {
				release = time.Time{}
			}
			mu.Unlock()
			if due {
				m.ReleaseCmd()
			}
			runtime.Gosched()
		}}
	n, err := connectx.Open(cfg)
	if err != nil {
		t.Fatalf("Open with a bring-up command taking 8 s: %v", err)
	}
	defer n.Close()
	m.SetFaults(connectxtest.Faults{HoldCmd: true})
	mu.Lock()
	start := clock
	mu.Unlock()
	err = n.Check()
	mu.Lock()
	waited := clock.Sub(start)
	mu.Unlock()
	if !errors.Is(err, connectx.ErrTimeout) || waited > 2*CmdTimeout {
		t.Fatalf("a data-path command never answered: %v after %v (want a timeout after %v)", err, waited, CmdTimeout)
	}
	m.ReleaseCmd()
}
