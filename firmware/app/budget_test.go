package app

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// liveHeap returns the live heap after two full collections (sync.Pool
// caches, gVisor's buffers among them, survive one in the victim cache).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// settledHeap samples the live heap until three samples 100 ms apart
// agree within 256 KiB (the transfers into full buffers have stopped),
// or 10 s pass, or it exceeds limit (then it returns at once: the
// caller fails). It asserts an amount, not a speed.
func settledHeap(limit int64) int64 {
	prev, same := liveHeap(), 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && same < 3 && prev <= limit; {
		time.Sleep(100 * time.Millisecond)
		h := liveHeap()
		if d := h - prev; d < 256<<10 && d > -256<<10 {
			same++
		} else {
			same = 0
		}
		prev = h
	}
	return prev
}

// TestDefaultLimitsFitTheBudget: the default limits' worst case fits the
// budget the README states.
func TestDefaultLimitsFitTheBudget(t *testing.T) {
	if b := DefaultLimits.Budget(); b > MemoryBudget {
		t.Fatalf("default limits: %d places, %.1f MiB, over the %d MiB budget", DefaultLimits.Places(), float64(b)/(1<<20), MemoryBudget>>20)
	}
}

// TestTCPBuffersBounded: the stack's TCP buffers come from the budget,
// and eight source clients that ask for a terabyte and never read hold
// at most their buffers' worth (they held 1 to 4 MiB each way apiece:
// gVisor's defaults, auto-tuned).
func TestTCPBuffersBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	var sb tcpip.TCPSendBufferSizeRangeOption
	var rb tcpip.TCPReceiveBufferSizeRangeOption
	if err := r.srv.Stack.TransportProtocolOption(tcp.ProtocolNumber, &sb); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Stack.TransportProtocolOption(tcp.ProtocolNumber, &rb); err != nil {
		t.Fatal(err)
	}
	if sb.Default != TCPSendBufferSize || sb.Max != sourceSendBuffer || rb.Max != TCPReceiveBufferSize {
		t.Fatalf("stack TCP buffers: send %+v receive %+v, want send %d (the source's %d at most), receive at most %d",
			sb, rb, TCPSendBufferSize, sourceSendBuffer, TCPReceiveBufferSize)
	}
	// The clients' stack is in this process too: a 16 KiB receive buffer
	// keeps what it holds out of the figure.
	crb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &crb)
	const n = 8
	before := liveHeap()
	// Each connection: the server's send buffer, the client's receive
	// buffer and both ends' overhead.
	limit := before + n*(sourceSendBuffer+16<<10+2*connOverhead)
	for range n {
		c := r.dial(t, SourcePort)
		fmt.Fprintf(c, "%d\n", int64(1)<<40)
	}
	eventually(t, "eight source clients served", func() bool { return r.srv.svc.source.active.Load() == n })
	if h := settledHeap(limit); h > limit {
		t.Fatalf("live heap grew by %.1f MiB with %d never-reading source clients, want at most %.1f MiB",
			float64(h-before)/(1<<20), n, float64(limit-before)/(1<<20))
	} else {
		t.Logf("live heap grew by %.2f MiB with %d never-reading source clients (bound %.2f MiB)",
			float64(h-before)/(1<<20), n, float64(limit-before)/(1<<20))
	}
}

// TestSourceLineBounded: the source's length line is bounded in bytes
// (an endless line used to be read whole) and in time from the
// connection's start (a trickle used to renew the idle timeout for
// ever); both are refused with a reason and counted.
func TestSourceLineBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{RequestTimeout: 300 * time.Millisecond, IdleTimeout: 5 * time.Second})
	endless := r.dial(t, SourcePort)
	go func() {
		digits := []byte(strings.Repeat("9", 4096))
		for {
			if _, err := endless.Write(digits); err != nil {
				return
			}
		}
	}()
	if got := closedByServer(t, endless, "endless line"); !strings.Contains(got, "longer than") {
		t.Fatalf("endless line: reply %q", got)
	}
	trickle := r.dial(t, SourcePort)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := trickle.Write([]byte("1")); err != nil {
					return
				}
			}
		}
	}()
	if got := closedByServer(t, trickle, "trickled line"); !strings.Contains(got, "bad request") {
		t.Fatalf("trickled line: reply %q", got)
	}
	eventually(t, "both counted", func() bool { return r.srv.svc.source.badRequests.Load() == 2 })
	// A good request still works.
	c := r.dial(t, SourcePort)
	fmt.Fprintf(c, "1000\n")
	b := make([]byte, 1000)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != string(Pattern[:1000]) {
		t.Fatalf("source after the refusals: %v", err)
	}
}

// TestSplitLimitsFitTheBudget: n interfaces each running the services
// with DefaultLimits.Split(n) fit, together, the budget one set fits
// (each used to take the full limits: three budgets on the i.MX7D).
func TestSplitLimitsFitTheBudget(t *testing.T) {
	for n := 1; n <= 3; n++ { // the i.MX7D runs 3; past that the floors add up
		l := DefaultLimits.Split(n)
		if b := int64(n) * l.Budget(); b > MemoryBudget {
			t.Errorf("%d interfaces: %d × %.1f MiB = %.1f MiB, over the %d MiB budget (limits %+v)",
				n, n, float64(l.Budget())/(1<<20), float64(b)/(1<<20), MemoryBudget>>20, l)
		}
	}
	if l := DefaultLimits.Split(3); l.MaxConns != 21 || l.HTTPMaxConns != 5 || l.IperfMaxStreams != 10 {
		t.Errorf("a third of the default limits: %+v", l)
	}
}
