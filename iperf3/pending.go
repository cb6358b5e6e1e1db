package iperf3

import (
	"net"
	"net/netip"
	"time"
)

// The connections waiting to send their cookie (at most MaxPending) are
// shared between peers (source addresses), as the firmware's other
// services share their places: a peer may hold all but a quarter of them
// (all of them below four), and when they are full a peer holding fewer
// than the peer holding the most closes that peer's oldest (counted in
// Evicted); a peer holding as many as any other is refused (Overloaded).
// Before this, silent connections from one address holding every slot
// got every other client's connection closed unread.

// shake is one connection waiting for its cookie.
type shake struct {
	peer  netip.Addr
	since time.Time
}

// peerOf returns c's remote IP (unspecified if it has none).
func peerOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.IPv4Unspecified()
}

// admit gives c a pending slot, evicting if it must, or counts it as
// overloaded and returns false.
func (s *Server) admit(c net.Conn) bool {
	peer := peerOf(c)
	peerMax := s.cfg.MaxPending - s.cfg.MaxPending/4
	var victim net.Conn
	s.mu.Lock()
	if s.byPeer[peer] >= peerMax {
		s.mu.Unlock()
		s.refuse(&s.stats.Overloaded, "overloaded: %v already has %d connections waiting for their cookie, closed %v", peer, peerMax, c.RemoteAddr())
		return false
	}
	if len(s.shakes) >= s.cfg.MaxPending {
		top, most := netip.Addr{}, 0
		for p, n := range s.byPeer {
			if n > most {
				top, most = p, n
			}
		}
		if most <= s.byPeer[peer] {
			s.mu.Unlock()
			s.refuse(&s.stats.Overloaded, "overloaded: %d connections already waiting for their cookie, closed %v", s.cfg.MaxPending, c.RemoteAddr())
			return false
		}
		var oldest time.Time
		for vc, sh := range s.shakes {
			if sh.peer == top && (victim == nil || sh.since.Before(oldest)) {
				victim, oldest = vc, sh.since
			}
		}
		s.releaseLocked(victim)
		s.stats.Evicted++
		s.stats.LastError = "evicted a connection of " + top.String() + " waiting for its cookie, for " + peer.String()
	}
	s.shakes[c] = &shake{peer: peer, since: time.Now()}
	s.byPeer[peer]++
	s.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return true
}

// release gives c's pending slot back, once.
func (s *Server) release(c net.Conn) {
	s.mu.Lock()
	s.releaseLocked(c)
	s.mu.Unlock()
}

func (s *Server) releaseLocked(c net.Conn) {
	sh, ok := s.shakes[c]
	if !ok {
		return
	}
	delete(s.shakes, c)
	if s.byPeer[sh.peer]--; s.byPeer[sh.peer] == 0 {
		delete(s.byPeer, sh.peer)
	}
}
