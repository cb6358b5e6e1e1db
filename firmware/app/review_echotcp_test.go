package app

import (
	"encoding/json"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// echoServerConn returns the server's side of the TCP echo's only place.
func echoServerConn(t *testing.T, r *limitsRig) *tcpConn {
	t.Helper()
	sv := &r.srv.svc.tcpEcho
	var c *tcpConn
	eventually(t, "one TCP echo place", func() bool {
		sv.mu.Lock()
		defer sv.mu.Unlock()
		for pl := range sv.places {
			c, _ = pl.conn.(*tcpConn)
		}
		return len(sv.places) == 1 && c != nil
	})
	return c
}

// TestReviewTCPEchoReceiveBufferBounded: Budget counts each echo place at
// echoBufferSize (16 KiB) of receive buffer, set on the listener. gVisor
// copies it into an accepted endpoint with notify=false (accept.go,
// createConnectingEndpoint: SetReceiveBufferSize(l.rcvWnd, false)), so
// OnSetReceiveBufferSize never sets RcvAutoParams.Disabled, and the
// stack's TCP protocol moderates receive buffers by default
// (moderateReceiveBuffer: true). The echo copies out everything it
// receives, so ModerateRecvBuf grows its buffer towards the stack's
// maximum (TCPReceiveBufferSize, 512 KiB). A peer that sends fast while
// reading, then stops reading and keeps sending, makes the place hold that
// much unread, past the budget's 16 KiB.
func TestReviewTCPEchoReceiveBufferBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	c := r.dial(t, EchoPort)
	s := echoServerConn(t, r)
	var reading atomic.Bool
	reading.Store(true)
	go func() {
		b := make([]byte, 64<<10)
		for reading.Load() {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			c.Read(b)
		}
	}()
	go func() {
		b := make([]byte, 64<<10)
		for {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	time.Sleep(2 * time.Second) // a fast exchange: the server copies out
	reading.Store(false)
	time.Sleep(2 * time.Second) // the client stops reading, keeps sending
	sz := s.ep.SocketOptions().GetReceiveBufferSize()
	q, terr := s.ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	if terr != nil {
		t.Fatal(terr)
	}
	if sz > echoBufferSize || q > echoBufferSize {
		t.Fatalf("TCP echo connection: receive buffer %d KiB, %d KiB held unread; Budget counts %d KiB",
			sz>>10, q>>10, echoBufferSize>>10)
	}
}

// statsBody returns GET /stats's body.
func statsBody(t *testing.T, r *limitsRig) []byte {
	t.Helper()
	resp, err := r.httpClient().Get("http://board/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReviewStatsBusyHistBounded: the busy histograms are 16 KiB each in
// fixedBuffers, but /stats renders every non-empty bucket of both as a
// map[string]uint32 and JSON, under the histogram's lock. They are
// cumulative since boot, never reset: after enough answers of varied cost
// (any peer's traffic in between varies it) most of the 4096 buckets are
// non-empty, and each GET /stats (open to anyone, HTTPMaxConns of them at
// once, each held for WriteTimeout by a peer that does not read) then
// builds two 4096-entry maps and a JSON body of ~100 KiB, where Budget
// gives an HTTP place 8 KiB beyond its headers and TCP buffers.
func TestReviewStatsBusyHistBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	base := len(statsBody(t, r))
	for _, h := range []*busyHist{&r.srv.svc.echo.busy, &r.srv.svc.tcpEchoBusy} {
		h.mu.Lock()
		for i := range h.counts {
			h.counts[i] = 1<<32 - 1 // a long uptime's counts
		}
		h.mu.Unlock()
	}
	full := len(statsBody(t, r))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	st := r.srv.limitStats()
	b, _ := json.Marshal(st)
	runtime.ReadMemStats(&ms1)
	alloc := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("/stats %d bytes before, %d with full histograms; limitStats+Marshal allocates %d KiB (JSON %d KiB)",
		base, full, alloc>>10, len(b)>>10)
	if grow := full - base; grow > 8<<10 {
		t.Fatalf("/stats grew by %d KiB with the busy histograms full (%d KiB allocated per request); Budget gives an HTTP place 8 KiB for its answer",
			grow>>10, alloc>>10)
	}
}
