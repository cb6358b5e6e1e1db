package netstack_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// TestTransfersResumeAfterEachFault: after each fault the host soak
// injects (a uDMA bus error, TX completions in error, a stalled uDMA, a
// link flap), a new transfer between the two stacks completes, byte for
// byte, and nothing is left held.
func TestTransfersResumeAfterEachFault(t *testing.T) {
	for _, c := range []struct {
		name   string
		inject func(a *host, w *fectest.Wire)
	}{
		{"bus error", func(a *host, _ *fectest.Wire) { a.rig.Model.SetFaults(fectest.Faults{BusError: true}) }},
		{"TX errors", func(a *host, _ *fectest.Wire) {
			a.rig.Model.SetFaults(fectest.Faults{TxError: fec.TXE_TXE | fec.TXE_UE, TxErrorCount: 3})
		}},
		{"link flap", func(_ *host, w *fectest.Wire) { w.SetLink(false); w.SetLink(true) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, w := pair(t, hostOptions{mode: modes[len(modes)-1], noTrace: true})
			watchLinks(t, a, b)
			if err := transfer(t, a, b, false, 5001, 1<<20); err != nil {
				t.Fatal(err)
			}
			c.inject(a, w)
			for i := range 3 {
				if err := transfer(t, a, b, false, uint16(5002+i), 1<<20); err != nil {
					t.Fatalf("after the fault: %v", err)
				}
				if err := transfer(t, b, a, false, uint16(5012+i), 1<<20); err != nil {
					t.Fatalf("after the fault, the other way: %v", err)
				}
			}
			drained(t, a, b)
			st := a.rig.NIC.Stats()
			t.Logf("bus errors %d, restarts %d, TX errors %d", st.BusErrors, st.Restarts, st.Tx.Errors)
		})
	}
}

// watchLinks takes over both hosts' PHYs and polls their links every
// 5 ms until the test ends, as a board's link watcher does: after a flap
// the PHY renegotiates, and the model completes autonegotiation only as
// its registers are read (a stand-in for the time silicon takes).
func watchLinks(t testing.TB, hs ...*host) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, h := range hs {
		p, err := h.rig.NIC.StartLink(fec.LinkConfig{Addrs: []int{0, 1, 2, 3}, Poll: time.Microsecond})
		if err != nil {
			t.Fatalf("StartLink: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				p.PollLink()
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}
