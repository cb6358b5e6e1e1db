package netstack_test

import (
	"errors"
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// The host half of the soak (make soak, issue 17): the firmware's
// configuration on two ENET models, many connections both ways, faults
// injected throughout, every byte checked, memory and counters watched.
//
//	go test ./netstack -run Soak -soak 2m
var (
	soakFor   = flag.Duration("soak", 0, "run the host soak for this long (0: skip it)")
	soakConns = flag.Int("soak.conns", 64, "concurrent TCP connections, half each way")
)

// TestSoakHostModels is make soak's host half.
func TestSoakHostModels(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("the soak runs with -soak DURATION (make soak)")
	}
	m := modes[len(modes)-1] // the firmware's
	a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
	watchLinks(t, a, b)
	const chunk = 1 << 20
	start := time.Now()
	deadline := start.Add(*soakFor)

	// Faults, one every 500 ms in turn: a burst of 8 frames lost to RX
	// overrun (delivered with the overrun status), a uDMA bus error, 3 TX
	// completions with an error, the uDMA stalled for 20 ms, a 50 ms link
	// flap. Each goes to one host, alternately.
	var overruns atomic.Int64
	type frame struct {
		to *fectest.Model
		f  []byte
	}
	pending := make(chan frame, 64)
	var burst [2]atomic.Int64
	w.SetFilter(func(from int, f []byte) fectest.Action {
		if burst[from].Load() > 0 && burst[from].Add(-1) >= 0 {
			select {
			case pending <- frame{[]*fectest.Model{b.rig.Model, a.rig.Model}[from], append([]byte(nil), f...)}:
			default:
			}
			return fectest.Drop
		}
		return fectest.Pass
	})
	var faults [5]atomic.Int64
	names := [5]string{"RX overrun bursts", "bus errors", "TX error bursts", "uDMA stalls", "link flaps"}
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Add(2)
	go func() { // the overrun frames, delivered to the other end
		defer fwg.Done()
		for {
			select {
			case <-stop:
				return
			case f := <-pending:
				if f.to.Deliver(f.f, fectest.RxOverrun) {
					overruns.Add(1)
				}
			}
		}
	}()
	go func() {
		defer fwg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			h := []*host{a, b}[i%2]
			switch k := (i / 2) % 5; k {
			case 0:
				burst[1-i%2].Store(8)
			case 1:
				h.rig.Model.SetFaults(fectest.Faults{BusError: true})
			case 2:
				h.rig.Model.SetFaults(fectest.Faults{TxError: fec.TXE_TXE | fec.TXE_UE, TxErrorCount: 3})
			case 3:
				h.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
				time.Sleep(20 * time.Millisecond)
				h.rig.Model.SetFaults(fectest.Faults{})
				h.rig.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
			case 4:
				w.SetLink(false)
				time.Sleep(50 * time.Millisecond)
				w.SetLink(true)
			}
			faults[(i/2)%5].Add(1)
		}
	}()

	// Memory and held packets, sampled every 500 ms.
	type sample struct {
		heap       uint64
		goroutines int
		held       int64
	}
	var samples []sample
	sdone := make(chan struct{})
	go func() {
		defer close(sdone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			samples = append(samples, sample{ms.HeapInuse, runtime.NumGoroutine(), a.ep.Stats().TxHeld + b.ep.Stats().TxHeld})
		}
	}()

	var port atomic.Int64 // a fresh port per transfer, below gVisor's ephemeral range
	var moved atomic.Int64
	var transfers atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range *soakConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, to := a, b
			if i%2 == 1 {
				from, to = b, a
			}
			for time.Now().Before(deadline) {
				if err := transferWith(t, from, to, false, uint16(1024+port.Add(1)%14000), chunk, xfer{timeout: 3 * time.Minute}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				moved.Add(chunk)
				transfers.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	fwg.Wait()
	<-sdone
	el := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v\n== a\n%s== b\n%s", err, a.diag(), b.diag())
	}
	drained(t, a, b)
	if len(samples) < 8 {
		t.Fatalf("%d samples: the soak was too short to judge growth", len(samples))
	}
	w5 := samples[len(samples)/5:]
	var p1, p2 sample
	var peak sample
	for _, s := range samples {
		peak.heap, peak.goroutines, peak.held = max(peak.heap, s.heap), max(peak.goroutines, s.goroutines), max(peak.held, s.held)
	}
	for i, s := range w5 {
		p := &p1
		if i >= len(w5)/2 {
			p = &p2
		}
		p.heap, p.goroutines, p.held = max(p.heap, s.heap), max(p.goroutines, s.goroutines), max(p.held, s.held)
	}
	if float64(p2.heap) > 1.25*float64(p1.heap)+16<<20 || float64(p2.goroutines) > 1.25*float64(p1.goroutines)+16 || p2.held > p1.held*5/4+64 {
		t.Errorf("growth: first half peaks %+v, second half %+v", p1, p2)
	}
	sa, sb := a.rig.NIC.Stats(), b.rig.NIC.Stats()
	t.Logf("host soak: %v, %d connections, %d transfers of 1 MiB (%d MiB), each SHA-256 checked", el.Round(time.Second), *soakConns, transfers.Load(), moved.Load()>>20)
	for k := range faults {
		t.Logf("  %s injected: %d", names[k], faults[k].Load())
	}
	t.Logf("  overrun frames delivered %d; driver: bus errors %d, restarts %d, TX errors %d, RX overruns %d; endpoint TX errors %d",
		overruns.Load(), sa.BusErrors+sb.BusErrors, sa.Restarts+sb.Restarts, sa.Tx.Errors+sb.Tx.Errors, sa.Rx.Overrun+sb.Rx.Overrun,
		a.ep.Stats().TxErrors+b.ep.Stats().TxErrors)
	t.Logf("  peaks: test process heap in use %.1f MiB, %d goroutines, %d TX packets held", float64(peak.heap)/(1<<20), peak.goroutines, peak.held)
	if sa.BusErrors+sb.BusErrors == 0 || sa.Tx.Errors+sb.Tx.Errors == 0 || overruns.Load() == 0 {
		t.Errorf("faults did not reach the driver: bus errors %d, TX errors %d, overruns %d", sa.BusErrors+sb.BusErrors, sa.Tx.Errors+sb.Tx.Errors, overruns.Load())
	}
}
