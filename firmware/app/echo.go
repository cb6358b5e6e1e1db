package app

import (
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// noEchoPorts are the source ports the echo service never answers: the
// ports of services that answer any datagram themselves (echo, RFC 862;
// daytime, RFC 867; quote of the day, RFC 865; chargen, RFC 864; time,
// RFC 868), of the DHCP server and client (RFC 2131 §4.1) and of iperf3
// (a UDP stream's first datagram is answered), and port 0, to which no
// reply can be addressed. A datagram from one of them, answered, would
// be answered back: two echo services, or an echo service and chargen,
// bounce one spoofed datagram between them for ever (inetd-derived
// servers refuse the same ports for the same reason).
var noEchoPorts = map[uint16]bool{0: true, 7: true, 13: true, 17: true, 19: true, 37: true, 67: true, 68: true, IperfPort: true}

// EchoStats is the echo service's member of /stats "limits".
type EchoStats struct {
	// Rate and Burst are the per-peer limit, in full-size frames of
	// answer (echoFrames: a datagram costs one per 1480 bytes): a second,
	// and at once.
	Rate  int `json:"rate"`
	Burst int `json:"burst"`
	// Answered datagrams; RefusedPort from a port in noEchoPorts;
	// RateLimited over a peer's rate, or from a new peer while MaxPeers
	// others are being limited; Peers tracked now.
	Answered    int64 `json:"answered"`
	RefusedPort int64 `json:"refused_port"`
	RateLimited int64 `json:"rate_limited"`
	Peers       int64 `json:"peers"`
	// Busy is the guest's busy time per answer (busyhist.go).
	Busy BusyHistStats `json:"busy"`
}

// echoMaxPeers bounds the peers the echo service tracks: a token bucket
// is 40 bytes, so the table stays under 64 KiB however many source
// addresses a spoofer uses. A bucket that has refilled is forgotten when
// room is needed; while every tracked peer is still being limited, a new
// peer is refused (counted), not given a fresh budget.
const echoMaxPeers = 1024

// bucket is one peer's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// echoService answers UDP datagrams with themselves, within its limits.
// Only its own goroutine (run) touches peers.
type echoService struct {
	rate, burst float64
	now         func() time.Time
	peers       map[netip.Addr]*bucket

	answered, refusedPort, rateLimited, npeers atomic.Int64
	busy                                       busyHist
}

func newEchoService(rate, burst int, now func() time.Time) *echoService {
	if now == nil {
		now = time.Now
	}
	return &echoService{rate: float64(rate), burst: float64(burst), now: now, peers: map[netip.Addr]*bucket{}}
}

func (e *echoService) stats(busy bool) EchoStats {
	if e == nil {
		return EchoStats{}
	}
	return EchoStats{Rate: int(e.rate), Burst: int(e.burst), Answered: e.answered.Load(), RefusedPort: e.refusedPort.Load(),
		RateLimited: e.rateLimited.Load(), Peers: e.npeers.Load(), Busy: e.busy.stats(busy)}
}

// echoFrames is what a datagram of n payload bytes costs: the full-size
// frames its answer takes on the wire (IPv4 fragments of at most 1480
// bytes of UDP header and payload, on a 1500-byte MTU), so that the
// limit bounds the bytes the board reflects, whatever the datagrams'
// size: at the default 1000 a second, 1.5 MB/s.
func echoFrames(n int) int { return (n + 8 + 1479) / 1480 }

// allow takes one token from addr's bucket (allowN).
func (e *echoService) allow(addr netip.Addr) bool { return e.allowN(addr, 1) }

// allowN takes cost tokens from addr's bucket.
func (e *echoService) allowN(addr netip.Addr, cost int) bool {
	now := e.now()
	b := e.peers[addr]
	if b == nil {
		if len(e.peers) >= echoMaxPeers {
			for a, o := range e.peers {
				if o.tokens+now.Sub(o.last).Seconds()*e.rate >= e.burst {
					delete(e.peers, a)
				}
			}
		}
		if len(e.peers) >= echoMaxPeers {
			return false
		}
		b = &bucket{tokens: e.burst, last: now}
		e.peers[addr] = b
		e.npeers.Store(int64(len(e.peers)))
	}
	b.tokens = min(e.burst, b.tokens+now.Sub(b.last).Seconds()*e.rate)
	b.last = now
	if b.tokens < float64(cost) {
		return false
	}
	b.tokens -= float64(cost)
	return true
}

// judge says whether the datagram of n bytes from from is answered,
// counting it.
func (e *echoService) judge(from net.Addr, n int) bool {
	ua, ok := from.(*net.UDPAddr)
	if !ok {
		e.refusedPort.Add(1)
		return false
	}
	ap := ua.AddrPort()
	if noEchoPorts[ap.Port()] {
		e.refusedPort.Add(1)
		return false
	}
	if !e.allowN(ap.Addr().Unmap(), echoFrames(n)) {
		e.rateLimited.Add(1)
		return false
	}
	e.answered.Add(1)
	return true
}

// run echoes every datagram c receives that judge allows, recording the
// busy time per answer from ctl's idle time.
func (e *echoService) run(c *gonet.UDPConn, ctl Controls) {
	buf := make([]byte, 1<<16)
	rec := e.busy.recorder(ctl)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		if e.judge(from, n) {
			c.WriteTo(buf[:n], from)
			rec.answered()
		}
	}
}
