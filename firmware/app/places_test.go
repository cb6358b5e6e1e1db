package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// httpClientFrom is an HTTP client of the server from the client stack's
// address from.
func (r *limitsRig) httpClientFrom(from tcpip.Address) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return gonet.DialTCPWithBind(ctx, r.client, tcpip.FullAddress{NIC: 1, Addr: from},
				tcpip.FullAddress{NIC: 1, Addr: r.addr, Port: HTTPPort}, ipv4.ProtocolNumber)
		}}}
}

// TestOnePeerCannotTakeEveryHTTPPlace: sixteen idle keep-alive
// connections from one address took every HTTP place, and /stats from
// another host got EOF. Now that peer holds at most 12 of the 16, the
// rest are refused and counted, and another peer is served.
func TestOnePeerCannotTakeEveryHTTPPlace(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	hog := r.peer(t, 1)
	for i := range DefaultLimits.HTTPMaxConns {
		c, err := r.dialFrom(t, hog, HTTPPort)
		if err != nil {
			t.Fatalf("hog connection %d: %v", i, err)
		}
		fmt.Fprintf(c, "GET /stats HTTP/1.1\r\nHost: board\r\n\r\n") // then idle, kept alive
	}
	eventually(t, "all sixteen accepted or refused", func() bool { return r.srv.svc.http.accepted.Load() == 16 })
	resp, err := r.httpClient().Get("http://board/stats")
	if err != nil {
		t.Fatalf("/stats from a second peer while the first holds its connections: %v", err)
	}
	resp.Body.Close()
	eventually(t, "the hog held to 12 places, 4 refused", func() bool {
		st := r.srv.svc.http.stats()
		return st.RefusedPeer == 4 && st.PeerMax == 12
	})
}

// TestFullServiceEvictsTheBiggestPeer: when every sink place is taken, a
// peer holding none takes the oldest place of the peer holding the most;
// a peer holding as many as any other is refused.
func TestFullServiceEvictsTheBiggestPeer(t *testing.T) {
	r := newLimitsRig(t, Limits{MaxConns: 8})
	hog, other, late := r.peer(t, 1), r.peer(t, 2), r.peer(t, 3)
	var held []net.Conn
	for range 8 {
		c, err := r.dialFrom(t, hog, SinkPort)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		// One at a time, so that the oldest is the first.
		eventually(t, "accepted", func() bool { return r.srv.svc.sink.accepted.Load() == int64(len(held)) })
	}
	// accepted counts before the place is given: wait for the verdicts.
	eventually(t, "the hog held to 6 of 8 places, 2 refused", func() bool {
		st := r.srv.svc.sink.stats()
		return st.Active == 6 && st.RefusedPeer == 2
	})
	for range 2 {
		if _, err := r.dialFrom(t, other, SinkPort); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "full", func() bool { return r.srv.svc.sink.active.Load() == 8 })
	c, err := r.dialFrom(t, late, SinkPort)
	if err != nil {
		t.Fatal(err)
	}
	if line := sinkRoundTrip(t, c, 1000); !strings.HasPrefix(line, "1000 ") {
		t.Fatalf("late peer's sink: %q", line)
	}
	closedByServer(t, held[0], "the hog's oldest connection")
	st := r.srv.svc.sink.stats()
	if st.Evicted != 1 || st.Refused != 2 {
		t.Fatalf("sink stats %+v: want one eviction and only the hog's two refusals", st)
	}
	// Full again (the hog 5, the second peer 3): the hog, holding the
	// most, is refused, and cannot evict.
	eventually(t, "late peer's place given back", func() bool { return r.srv.svc.sink.active.Load() == 7 })
	if _, err := r.dialFrom(t, other, SinkPort); err != nil {
		t.Fatal(err)
	}
	eventually(t, "full again", func() bool { return r.srv.svc.sink.active.Load() == 8 })
	extra, err := r.dialFrom(t, hog, SinkPort)
	if err != nil {
		t.Fatal(err)
	}
	if got := closedByServer(t, extra, "the hog's connection over the bound"); got != "" {
		t.Fatalf("refused connection got %q", got)
	}
	if st := r.srv.svc.sink.stats(); st.Evicted != 1 {
		t.Fatalf("sink stats %+v: the hog evicted someone", st)
	}
}
