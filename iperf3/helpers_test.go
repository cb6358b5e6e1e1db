package iperf3

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// testServer is a Server on 127.0.0.1 with TCP and UDP on one port.
type testServer struct {
	*Server
	port int
	done chan error
	logs struct {
		sync.Mutex
		lines []string
	}
}

// startServer listens on a free loopback port (TCP and UDP alike) and
// serves until the test ends; the cleanup closes the server and checks
// that every goroutine it started has returned.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerUDP(t, cfg, nil)
}

// startServerUDP is startServer with the UDP socket passed through wrap
// (when not nil) before the server gets it.
func startServerUDP(t *testing.T, cfg Config, wrap func(net.PacketConn) net.PacketConn) *testServer {
	t.Helper()
	before := runtime.NumGoroutine()
	var tl net.Listener
	var ul net.PacketConn
	for i := 0; ; i++ {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			tl, ul = l, u
			break
		}
		l.Close()
		if i == 20 {
			t.Fatalf("no port free for both TCP and UDP: %v", err)
		}
	}
	ts := &testServer{port: tl.Addr().(*net.TCPAddr).Port, done: make(chan error, 1)}
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) {
			ts.logs.Lock()
			ts.logs.lines = append(ts.logs.lines, fmt.Sprintf(f, a...))
			ts.logs.Unlock()
		}
	}
	if wrap != nil {
		ul = wrap(ul)
	}
	ts.Server = NewServer(tl, ul, cfg)
	go func() { ts.done <- ts.Serve() }()
	t.Cleanup(func() {
		if err := ts.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if n := ts.Goroutines(); n != 0 {
			t.Errorf("%d server goroutines still running after Close", n)
		}
		// Everything the server started is gone (counted above); the
		// runtime's count settles once the exited goroutines and the
		// host's poller threads catch up.
		waitFor(t, "goroutine count back to its starting value", func() bool { return runtime.NumGoroutine() <= before })
		ts.logs.Lock()
		for _, l := range ts.logs.lines {
			t.Log(l)
		}
		ts.logs.Unlock()
	})
	return ts
}

// addr is the server's TCP address.
func (ts *testServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", ts.port) }

// idle waits until no test is active and only the UDP reader runs.
func (ts *testServer) idle(t *testing.T) {
	t.Helper()
	waitFor(t, "server idle with only its UDP reader running", func() bool {
		return !ts.Busy() && ts.Goroutines() == 1
	})
}

// waitFor polls cond until it holds; it fails the test after a generous
// bound so that a hang is reported rather than timing out the binary. It
// asserts an outcome, not a speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("never reached: %s\n%s", what, buf[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
