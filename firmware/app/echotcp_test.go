package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// tcpRoundTrip writes d on c and reads len(d) bytes back (10 s at most).
func tcpRoundTrip(t *testing.T, c net.Conn, d []byte) {
	t.Helper()
	if _, err := c.Write(d); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(d))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, d) {
		t.Fatalf("TCP echo of %d bytes: %q, %v", len(d), got, err)
	}
}

// histCount returns the samples in h.
func histCount(h BusyHistStats) int {
	n := int(h.Over)
	for _, k := range h.Counts {
		n += int(k)
	}
	return n
}

// TestTCPEchoEchoes: TCP 7 sends back what it is sent, 1 byte and 64 at a
// time and a block larger than its read size, and records the busy time
// of every answer but a connection's first in /stats.
func TestTCPEchoEchoes(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	c := r.dial(t, EchoPort)
	for i := range 50 {
		tcpRoundTrip(t, c, []byte{byte(i)})
		tcpRoundTrip(t, c, bytes.Repeat([]byte{byte(i)}, 64))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB: several reads
	tcpRoundTrip(t, c, big)
	var st Stats
	getJSON(t, r, "/stats", &st)
	if st.Limits.TCPEcho.Accepted != 1 || st.Limits.TCPEcho.Active != 1 || st.Limits.TCPEcho.Max != DefaultLimits.EchoMaxConns {
		t.Fatalf("/stats limits.tcp_echo %+v", st.Limits.TCPEcho)
	}
	if h := st.Limits.TCPEchoBusy; len(h.Counts) != 0 || h.BucketNs != busyBucketNs {
		t.Fatalf("/stats without the token rendered the busy histogram's counts: %+v", h)
	}
	// With ?busy=1 and the token (what tamanic-bench -rr reads).
	h := r.srv.limitStats(true).TCPEchoBusy
	// 100 small answers, the first only a mark; the big block is
	// answered in one or more writes.
	if n := histCount(h); n < 99 || h.BucketNs != busyBucketNs {
		t.Fatalf("tcp_echo_busy: %d samples (want at least 99), %+v", n, h)
	}
	for k := range h.Counts {
		if _, err := strconv.Atoi(k); err != nil {
			t.Fatalf("bucket %q is not a number", k)
		}
	}
}

// TestTCPEchoTrickleExpires: a peer sending a byte every 100 ms renews the
// idle timeout (300 ms) for ever; the connection's lifetime (1 s) closes
// it anyway, counted as expired. Without the lifetime it stayed open
// (checked by making serveTCPEcho's deadline the idle one alone: the
// test then fails at closedByServer's 10 s).
func TestTCPEchoTrickleExpires(t *testing.T) {
	r := newLimitsRig(t, Limits{IdleTimeout: 300 * time.Millisecond, EchoLifetime: time.Second})
	c := r.dial(t, EchoPort)
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte{'x'}); err != nil {
				return
			}
		}
	}()
	closedByServer(t, c, "trickling TCP echo client")
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("closed after %v, before its lifetime", d)
	}
	eventually(t, "the expiry counted", func() bool { return r.srv.svc.tcpEcho.expired.Load() == 1 })
	if n := r.srv.svc.tcpEcho.idleClosed.Load(); n != 0 {
		t.Fatalf("a trickling connection counted as idle: %d", n)
	}
}

// TestTCPEchoIdleCloses: a silent connection is closed after the idle
// timeout, and so is one that sends and never reads, once its write
// stalls on the closed window for the idle timeout.
func TestTCPEchoIdleCloses(t *testing.T) {
	r := newLimitsRig(t, Limits{IdleTimeout: 300 * time.Millisecond})
	silent := r.dial(t, EchoPort)
	closedByServer(t, silent, "silent TCP echo client")
	eventually(t, "the silent one counted idle", func() bool { return r.srv.svc.tcpEcho.idleClosed.Load() == 1 })

	deaf := r.dial(t, EchoPort)
	go func() {
		b := make([]byte, 4096)
		for {
			deaf.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := deaf.Write(b); err != nil {
				return
			}
		}
	}()
	eventually(t, "the never-reading one closed as idle", func() bool { return r.srv.svc.tcpEcho.idleClosed.Load() == 2 })
}

// TestTCPEchoPlacesShared: one peer holds at most peerMax of the echo's
// places (3 of 4), and another peer is still served.
func TestTCPEchoPlacesShared(t *testing.T) {
	r := newLimitsRig(t, Limits{EchoMaxConns: 4})
	hog := r.peer(t, 1)
	for i := range 4 {
		if _, err := r.dialFrom(t, hog, EchoPort); err != nil {
			t.Fatalf("hog connection %d: %v", i, err)
		}
	}
	eventually(t, "the hog's fourth refused", func() bool { return r.srv.svc.tcpEcho.refusedPeer.Load() == 1 })
	tcpRoundTrip(t, r.dial(t, EchoPort), []byte("second peer"))
	if st := r.srv.svc.tcpEcho.stats(); st.Active != 4 || st.PeerMax != 3 {
		t.Fatalf("tcp_echo %+v", st)
	}
}

// TestEchoRecordsBusy: the UDP echo records the busy time of every answer
// but its first.
func TestEchoRecordsBusy(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	c := r.echoFrom(t, 0)
	for i := range 20 {
		roundTrip(t, c, []byte{byte(i)})
	}
	// The echo records an answer after sending it: the last one may land
	// just after the client has it.
	eventually(t, "19 UDP echo busy samples", func() bool { return histCount(r.srv.svc.echo.stats(true).Busy) == 19 })
	if n := histCount(r.srv.svc.echo.stats(true).Busy); n != 19 {
		t.Fatalf("UDP echo busy samples %d, want 19", n)
	}
}

// TestBusyHistBuckets: samples land in 1 µs buckets, long ones in over,
// and a negative one nowhere.
func TestBusyHistBuckets(t *testing.T) {
	var h busyHist
	for _, ns := range []int64{0, 999, 1000, 2500, busyBuckets * busyBucketNs, -5} {
		h.add(ns)
	}
	st := h.stats(true)
	if st.Counts["0"] != 2 || st.Counts["1"] != 1 || st.Counts["2"] != 1 || st.Over != 1 || len(st.Counts) != 3 {
		t.Fatalf("%+v", st)
	}
}

// TestStatsBusyNeedsToken: GET /stats renders the echoes' busy-time
// histogram counts only with ?busy=1 and the control token.
func TestStatsBusyNeedsToken(t *testing.T) {
	if BuildControlToken != "" {
		t.Skip("test binary linked with a control token")
	}
	r := newLimitsRig(t, Limits{})
	r.srv.svc.tcpEchoBusy.add(5000)
	r.srv.ControlToken = "secret"
	for _, c := range []struct {
		url, auth string
		counts    bool
	}{{"/stats", "", false}, {"/stats?busy=1", "", false}, {"/stats?busy=1", "Bearer wrong", false},
		{"/stats", "Bearer secret", false}, {"/stats?busy=1", "Bearer secret", true}} {
		req := httptest.NewRequest(http.MethodGet, c.url, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		r.srv.stats(w, req)
		var st Stats
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != 200 {
			t.Fatalf("%s %q: %d %v", c.url, c.auth, w.Code, err)
		}
		if got := len(st.Limits.TCPEchoBusy.Counts) > 0; got != c.counts {
			t.Errorf("%s %q: counts rendered %v, want %v", c.url, c.auth, got, c.counts)
		}
	}
}
