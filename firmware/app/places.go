package app

import (
	"net"
	"net/netip"
	"time"
)

// A service's places are shared between peers (source addresses), so
// that one peer cannot take them all:
//
//   - a peer may hold at most peerMax places: all but a quarter of the
//     service's (every place when it has fewer than four), so others find
//     room without anyone being evicted. One address may be many hosts
//     (behind NAT, or QEMU's user network, where every host connection
//     arrives from 10.0.0.2), so the share is generous;
//   - when the service is full, a peer holding fewer places than the peer
//     holding the most takes that peer's oldest place (the connection is
//     closed and counted as evicted); a peer holding as many as any other
//     is refused. A second peer is therefore always served, whatever the
//     first holds, and a peer can only ever evict a bigger one.
//
// Before this, places were first come, first served: sixteen idle
// keep-alive connections from one address took every HTTP place for 30
// s, renewable, and /stats from any other host got EOF.

// place is one connection's place in a service.
type place struct {
	peer  netip.Addr
	conn  net.Conn
	since time.Time
}

// peerMax is the most places one peer may hold.
func (sv *service) peerMax() int { return sv.max - sv.max/4 }

// peerOf returns c's remote address (unspecified if it has none).
func peerOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.IPv4Unspecified()
}

// take gives c a place, evicting the oldest place of the peer holding the
// most if the service is full, or returns nil if c's peer may not have
// one (counted).
func (sv *service) take(c net.Conn) *place {
	peer := peerOf(c)
	var victim *place
	sv.mu.Lock()
	if sv.places == nil {
		sv.places, sv.byPeer = map[*place]struct{}{}, map[netip.Addr]int{}
	}
	if sv.byPeer[peer] >= sv.peerMax() {
		sv.mu.Unlock()
		sv.refusedPeer.Add(1)
		return nil
	}
	if len(sv.places) >= sv.max {
		top, most := netip.Addr{}, 0
		for p, n := range sv.byPeer {
			if n > most {
				top, most = p, n
			}
		}
		if most <= sv.byPeer[peer] {
			sv.mu.Unlock()
			return nil
		}
		for pl := range sv.places {
			if pl.peer == top && (victim == nil || pl.since.Before(victim.since)) {
				victim = pl
			}
		}
		sv.dropLocked(victim)
		sv.evicted.Add(1)
	}
	pl := &place{peer: peer, conn: c, since: time.Now()}
	sv.places[pl] = struct{}{}
	sv.byPeer[peer]++
	sv.active.Store(int64(len(sv.places)))
	sv.mu.Unlock()
	if victim != nil {
		giveUp(victim.conn)
		victim.conn.Close()
	}
	return pl
}

// release gives pl's place back, once (an evicted place is already
// back).
func (sv *service) release(pl *place) {
	sv.mu.Lock()
	sv.dropLocked(pl)
	sv.mu.Unlock()
}

func (sv *service) dropLocked(pl *place) {
	if _, ok := sv.places[pl]; !ok {
		return
	}
	delete(sv.places, pl)
	if sv.byPeer[pl.peer]--; sv.byPeer[pl.peer] == 0 {
		delete(sv.byPeer, pl.peer)
	}
	sv.active.Store(int64(len(sv.places)))
}
