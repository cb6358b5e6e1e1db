package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// TestHostilePeerWithinBudget drives every service at once from one
// hostile peer (10.0.0.11) for a few seconds: never-reading and silent
// sink clients, endless source lines, never-reading source clients asking
// for a terabyte, pipelined HTTP requests whose answers are never read,
// silent iperf3 connections filling the cookie slots, valid cookies
// followed by junk, a UDP echo flood, never-reading and silent TCP echo
// clients, and connection floods on every port. Throughout, a second
// peer (10.0.0.2) is served by the sink, the source, HTTP and both
// echoes. The live heap after collection never grows
// past the limits' budget (Limits.Budget, the formula behind the
// README's figure), with small limits so that the peer can fill every
// place in seconds.
func TestHostilePeerWithinBudget(t *testing.T) {
	l := Limits{MaxConns: 4, HTTPMaxConns: 4, IperfMaxStreams: 4, IperfMaxPending: 4, IperfMaxWaiters: 2, EchoRate: 50, EchoBurst: 10,
		EchoMaxConns: 4}
	r := newLimitsRig(t, l)
	// The attacker's own stack is in this process too: small buffers, so
	// that what it holds (at most 16 KiB a connection each way) stays out
	// of the figure.
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 16 << 10, Max: 16 << 10}
	r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &sb)
	r.client.SetTransportProtocolOption(tcp.ProtocolNumber, &rb)
	hog := r.peer(t, 1)

	before := liveHeap()
	// The attacker's buffers: the connections it holds open (at most a
	// place each, and the 30 of its goroutines), 32 KiB each.
	attacker := int64(l.Places()+30) * 32 << 10
	limit := before + l.Budget() + attacker

	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	// attack dials port from the hostile peer over and over (a
	// connection flood, 5 ms apart) and runs f on each until it returns.
	attack := func(port uint16, f func(c net.Conn)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, err := gonet.DialTCPWithBind(ctx, r.client, tcpip.FullAddress{NIC: 1, Addr: hog},
					tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: port}, ipv4.ProtocolNumber)
				cancel()
				if err == nil {
					f(c)
					c.Close()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	// hold keeps c, unread, until the attack ends.
	hold := func(c net.Conn) { <-stop }
	// flood writes b on c, never reading, until the server drops it or
	// the attack ends.
	flood := func(b []byte) func(net.Conn) {
		return func(c net.Conn) {
			for !stopped() {
				c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := c.Write(b); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						continue // the server stopped reading: keep holding
					}
					return
				}
			}
		}
	}
	digits := bytes.Repeat([]byte("9"), 16<<10)
	cookieAndJunk := append(append(bytes.Repeat([]byte("h"), 36), 0), digits...)
	pipelined := []byte(strings.Repeat("GET /stats HTTP/1.1\r\nHost: board\r\n\r\n", 64))
	for range 3 {
		// Sink: a slow writer, a byte every 100 ms, never reading.
		attack(SinkPort, func(c net.Conn) {
			for !stopped() {
				if _, err := c.Write([]byte{1}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		attack(SourcePort, flood(digits)) // endless lines
		attack(SourcePort, func(c net.Conn) { fmt.Fprintf(c, "%d\n", int64(1)<<40); hold(c) })
		attack(HTTPPort, flood(pipelined)) // answers never read
		attack(IperfPort, hold)            // silent: cookie slots
		attack(IperfPort, flood(cookieAndJunk))
		attack(EchoPort, flood(digits)) // TCP echo: sends, never reads
		attack(EchoPort, hold)          // and silent
	}
	// UDP echo flood: bursts of 20 datagrams every 10 ms.
	wg.Add(1)
	go func() {
		defer wg.Done()
		u, err := gonet.DialUDP(r.client, &tcpip.FullAddress{NIC: 1, Addr: hog}, &tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: EchoPort}, ipv4.ProtocolNumber)
		if err != nil {
			t.Error(err)
			return
		}
		defer u.Close()
		for !stopped() {
			for range 20 {
				u.Write(digits[:1400])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// The second peer, served throughout; the heap sampled after each
	// round.
	for round := range 3 {
		c := r.dial(t, SinkPort)
		if line := sinkRoundTrip(t, c, 10000); !strings.HasPrefix(line, "10000 ") {
			t.Fatalf("round %d: sink %q", round, line)
		}
		c = r.dial(t, SourcePort)
		fmt.Fprintf(c, "10000\n")
		b := make([]byte, 10000)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil || !bytes.Equal(b, Pattern[:10000]) {
			t.Fatalf("round %d: source: %v", round, err)
		}
		c.Close()
		var st Stats
		getJSON(t, r, "/stats", &st)
		roundTrip(t, r.echoFrom(t, 0), []byte(fmt.Sprintf("round %d", round)))
		c = r.dial(t, EchoPort)
		tcpRoundTrip(t, c, []byte(fmt.Sprintf("round %d", round)))
		c.Close()
		h := liveHeap()
		t.Logf("round %d: live heap +%.2f MiB (limit +%.2f MiB); sink %+v source %+v http %+v echo %+v", round,
			float64(h-before)/(1<<20), float64(limit-before)/(1<<20), st.Limits.Sink, st.Limits.Source, st.Limits.HTTP, st.Limits.Echo)
		if h > limit {
			t.Errorf("round %d: live heap grew by %.1f MiB, past the budget of %.1f MiB", round, float64(h-before)/(1<<20), float64(limit-before)/(1<<20))
		}
	}
	close(stop)
	wg.Wait()
	st := &r.srv.svc
	if st.source.badRequests.Load() == 0 || st.echo.rateLimited.Load() == 0 {
		t.Errorf("the attack did not reach the limits: source %+v echo %+v", st.source.stats(), st.echo.stats(true))
	}
}
