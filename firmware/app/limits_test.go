package app

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// limitsRig is a Server on one stack and a client stack joined to it.
type limitsRig struct {
	srv    *Server
	client *stack.Stack
	addr   tcpip.Address
}

func newLimitsRig(t *testing.T, l Limits) *limitsRig {
	t.Helper()
	return newLimitsRigWith(t, l, nil)
}

// newLimitsRigWith is newLimitsRig with mod applied to the server before
// it starts.
func newLimitsRigWith(t *testing.T, l Limits, mod func(*Server)) *limitsRig {
	t.Helper()
	a, b := netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("10.0.0.2/24")
	m1, m2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	e1, e2 := pipe.New(tcpip.LinkAddress(m1[:]), tcpip.LinkAddress(m2[:]), 1500)
	s1, err := NewStack(e1, m1, a, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewStack(e2, m2, b, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close(); s1.Close() })
	r := &limitsRig{client: s2, addr: tcpip.AddrFrom4(a.Addr().As4()),
		srv: &Server{Stack: s1, NIC: 1, Addr: tcpip.AddrFrom4(a.Addr().As4()), Ctl: &fakeCtl{tx: "tso"}, Boot: time.Now(), Limits: l}}
	if mod != nil {
		mod(r.srv)
	}
	if err := r.srv.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// peer adds 10.0.0.(10+i)/24 to the client stack and returns it: another
// peer, as the server tells peers apart (by source address).
func (r *limitsRig) peer(t *testing.T, i int) tcpip.Address {
	t.Helper()
	a := tcpip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)})
	if err := r.client.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: a, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatalf("peer address %v: %v", a, err)
	}
	return a
}

// dialFrom connects from the client stack's address from to port.
func (r *limitsRig) dialFrom(t *testing.T, from tcpip.Address, port uint16) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gonet.DialTCPWithBind(ctx, r.client, tcpip.FullAddress{NIC: 1, Addr: from}, tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func (r *limitsRig) dial(t *testing.T, port uint16) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, r.client, tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial %d: %v", port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (r *limitsRig) httpClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return gonet.DialContextTCP(ctx, r.client, tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: HTTPPort}, ipv4.ProtocolNumber)
		}}}
}

// closedByServer waits (at most 10 s, far beyond any limit under test)
// for c to be closed by the server: a read that ends in EOF or a reset,
// not in the client's own deadline. It returns what was read.
func closedByServer(t *testing.T, c net.Conn, what string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("%s: still open after 10 s (read %q)", what, b)
	}
	return string(b)
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// sinkRoundTrip sends n bytes to the sink on c and returns its reply line.
func sinkRoundTrip(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	c.(*gonet.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("sink reply: %v", err)
	}
	return line
}

// TestConnectionsBoundedPerService: past MaxConns, a sink or source
// connection is closed at once and counted; once one ends, a new one is
// served.
func TestConnectionsBoundedPerService(t *testing.T) {
	r := newLimitsRig(t, Limits{MaxConns: 3})
	for _, svc := range []struct {
		port uint16
		sv   *service
	}{{SinkPort, &r.srv.svc.sink}, {SourcePort, &r.srv.svc.source}} {
		var held []net.Conn
		for range 3 {
			held = append(held, r.dial(t, svc.port))
		}
		eventually(t, "three connections active", func() bool { return svc.sv.active.Load() == 3 })
		over := r.dial(t, svc.port)
		if got := closedByServer(t, over, fmt.Sprintf("port %d connection over the bound", svc.port)); got != "" {
			t.Fatalf("port %d: refused connection got %q", svc.port, got)
		}
		if st := svc.sv.stats(); st.Refused != 1 || st.Active != 3 || st.Accepted != 4 {
			t.Fatalf("port %d: stats %+v, want 4 accepted, 1 refused, 3 active", svc.port, st)
		}
		held[0].Close()
		eventually(t, "a place freed", func() bool { return svc.sv.active.Load() == 2 })
		c := r.dial(t, svc.port)
		if svc.port == SinkPort {
			line := sinkRoundTrip(t, c, 1000)
			sum := sha256.Sum256(make([]byte, 1000))
			if f := strings.Fields(line); len(f) != 5 || f[0] != "1000" || f[4] != hex.EncodeToString(sum[:]) {
				t.Fatalf("sink after a place freed: %q, want 1000 bytes and their SHA-256", line)
			}
		} else {
			fmt.Fprintf(c, "100\n")
			b := make([]byte, 100)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, b); err != nil || string(b) != string(Pattern[:100]) {
				t.Fatalf("source after a place freed: %v", err)
			}
		}
		for _, h := range held[1:] {
			h.Close()
		}
	}
	var st Stats
	getJSON(t, r, "/stats", &st)
	if st.Limits.Sink.Refused != 1 || st.Limits.Source.Refused != 1 || st.Limits.Sink.Max != 3 {
		t.Fatalf("/stats limits %+v", st.Limits)
	}
}

// TestIdleConnectionsClosed: a sink or source client that stops moving
// bytes loses its connection after IdleTimeout, and it is counted.
func TestIdleConnectionsClosed(t *testing.T) {
	r := newLimitsRig(t, Limits{IdleTimeout: 200 * time.Millisecond})
	// The source waits for a length line that never comes.
	src := r.dial(t, SourcePort)
	closedByServer(t, src, "silent source client")
	eventually(t, "source idle close counted", func() bool { return r.srv.svc.source.idleClosed.Load() == 1 })
	// The sink got some bytes, then nothing, and no EOF: it gives up,
	// reports what it had, and closes.
	sink := r.dial(t, SinkPort)
	if _, err := sink.Write(make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	if got := closedByServer(t, sink, "stalled sink client"); !strings.HasPrefix(got, "5000 ") {
		t.Fatalf("sink reply %q, want 5000 bytes counted", got)
	}
	eventually(t, "sink idle close counted", func() bool { return r.srv.svc.sink.idleClosed.Load() == 1 })
	eventually(t, "no connection left", func() bool {
		return r.srv.svc.sink.active.Load() == 0 && r.srv.svc.source.active.Load() == 0
	})
	// A source client that never reads: the write stalls on a closed
	// window and times out too.
	hog := r.dial(t, SourcePort)
	fmt.Fprintf(hog, "%d\n", int64(1)<<40)
	eventually(t, "non-reading source client dropped", func() bool { return r.srv.svc.source.idleClosed.Load() == 2 })
	eventually(t, "no connection left", func() bool { return r.srv.svc.source.active.Load() == 0 })
}

// TestSlowHTTPClientsCannotHoldTheServer: clients that open connections
// and never finish a request (slowloris) are dropped after
// ReadHeaderTimeout, so even when they fill every HTTP place the server
// answers again; a connection over the bound is closed at once; oversized
// headers get 431; an idle keep-alive connection is closed.
func TestSlowHTTPClientsCannotHoldTheServer(t *testing.T) {
	r := newLimitsRig(t, Limits{HTTPMaxConns: 2, ReadHeaderTimeout: 300 * time.Millisecond,
		HTTPIdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 1024})
	var slow []net.Conn
	for range 2 {
		c := r.dial(t, HTTPPort)
		fmt.Fprintf(c, "GET /stats HTTP/1.1\r\nHost: board\r\n") // and never the blank line
		slow = append(slow, c)
	}
	eventually(t, "two slow clients hold both places", func() bool { return r.srv.svc.http.active.Load() == 2 })
	if got := closedByServer(t, r.dial(t, HTTPPort), "HTTP connection over the bound"); got != "" {
		t.Fatalf("over the bound: got %q", got)
	}
	for i, c := range slow {
		closedByServer(t, c, fmt.Sprintf("slow client %d", i))
	}
	eventually(t, "places freed", func() bool { return r.srv.svc.http.active.Load() == 0 })
	var st Stats
	getJSON(t, r, "/stats", &st)
	if st.Limits.HTTP.Refused != 1 {
		t.Fatalf("http limits %+v, want 1 refused", st.Limits.HTTP)
	}
	// Oversized headers.
	req, _ := http.NewRequest(http.MethodGet, "http://board/stats", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
	resp, err := r.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("8 KiB header: status %d, want 431", resp.StatusCode)
	}
	// An idle keep-alive connection after one request. The two requests
	// above (the /stats read and the 431) may still hold both places for
	// a moment after their responses arrived: the server releases a place
	// only when its handler has closed the connection. Wait for that, or
	// the bound (2) rightly refuses this dial.
	eventually(t, "places freed after the 431", func() bool { return r.srv.svc.http.active.Load() == 0 })
	c := r.dial(t, HTTPPort)
	fmt.Fprintf(c, "GET /stats HTTP/1.1\r\nHost: board\r\n\r\n")
	if got := closedByServer(t, c, "idle keep-alive connection"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("keep-alive request: %q (http limits refused %d)", got, r.srv.svc.http.refused.Load())
	}
}

func getJSON(t *testing.T, r *limitsRig, path string, v any) {
	t.Helper()
	resp, err := r.httpClient().Get("http://board" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestStatsReportRuntime: /stats carries the heap and goroutine figures
// the soak watches.
func TestStatsReportRuntime(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	var st Stats
	getJSON(t, r, "/stats", &st)
	if st.Runtime.Goroutines < 5 || st.Runtime.HeapAlloc == 0 || st.Runtime.Sys < st.Runtime.HeapSys || st.Runtime.Mallocs == 0 {
		t.Fatalf("runtime stats %+v", st.Runtime)
	}
	if st.Limits.Sink.Max != DefaultLimits.MaxConns || st.Limits.HTTP.Max != DefaultLimits.HTTPMaxConns {
		t.Fatalf("limits %+v, want the defaults", st.Limits)
	}
}
