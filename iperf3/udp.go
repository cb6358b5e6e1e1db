package iperf3

import (
	"encoding/binary"
	"time"
)

// udpHeader is the start of every iperf3 UDP datagram: the sender's clock
// (seconds and microseconds, big-endian 32-bit each) and the packet's
// sequence number counted from 1, big-endian, 32 or 64 bits wide
// (iperf_udp.c, iperf_udp_send).
type udpHeader struct {
	sec, usec uint32
	seq       uint64
}

// udpHeaderLen returns the header length for the negotiated counter width.
func udpHeaderLen(counters64 bool) int {
	if counters64 {
		return 16
	}
	return 12
}

// decodeUDPHeader parses a datagram's header; ok is false if it is short.
func decodeUDPHeader(b []byte, counters64 bool) (h udpHeader, ok bool) {
	if len(b) < udpHeaderLen(counters64) {
		return h, false
	}
	h.sec = binary.BigEndian.Uint32(b)
	h.usec = binary.BigEndian.Uint32(b[4:])
	if counters64 {
		h.seq = binary.BigEndian.Uint64(b[8:])
	} else {
		h.seq = uint64(binary.BigEndian.Uint32(b[8:]))
	}
	return h, true
}

// encodeUDPHeader writes h at the start of b, which must be long enough.
func encodeUDPHeader(b []byte, h udpHeader, counters64 bool) {
	binary.BigEndian.PutUint32(b, h.sec)
	binary.BigEndian.PutUint32(b[4:], h.usec)
	if counters64 {
		binary.BigEndian.PutUint64(b[8:], h.seq)
	} else {
		binary.BigEndian.PutUint32(b[8:], uint32(h.seq))
	}
}

// udpRecvStats counts one receiving UDP stream the way the reference
// receiver does, so the client's loss and jitter figures mean the same:
//
//   - highest is the highest sequence number seen; a jump over missing
//     numbers adds them to lost; a number at or below highest is out of
//     order and, if any loss was counted, takes one loss back;
//   - jitter is the RFC 3550 (A.8) running estimate, in seconds, of the
//     variation of transit time (arrival minus the sender's timestamp),
//     smoothed by 1/16; the clocks need not agree because only
//     differences of transit times count.
type udpRecvStats struct {
	highest     uint64
	lost        uint64
	outOfOrder  uint64
	short       uint64 // datagrams too short to hold a header
	jitter      float64
	prevTransit float64
	seen        bool
}

// add accounts for one datagram's header that arrived at time now.
func (s *udpRecvStats) add(h udpHeader, now time.Time) {
	if h.seq > s.highest {
		s.lost += h.seq - 1 - s.highest
		s.highest = h.seq
	} else {
		s.outOfOrder++
		if s.lost > 0 {
			s.lost--
		}
	}
	sent := int64(h.sec)*1e9 + int64(h.usec)*1e3
	transit := float64(now.UnixNano()-sent) / 1e9
	if !s.seen {
		s.prevTransit = transit
		s.seen = true
	}
	d := transit - s.prevTransit
	if d < 0 {
		d = -d
	}
	s.prevTransit = transit
	s.jitter += (d - s.jitter) / 16
}
