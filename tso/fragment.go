package tso

import (
	"encoding/binary"
	"fmt"

	"github.com/tamanic/tamanic/internal/pkt"
)

func (s *Segmenter) initFragments() error {
	h, o := s.h, s.o
	if h.Proto != pkt.ProtoUDP {
		return fmt.Errorf("%w: UDP fragmentation of protocol %d", ErrType, h.Proto)
	}
	if o.MSS < MinUDPMSS || o.MSS > MaxPacket {
		return fmt.Errorf("%w: fragment size %d", ErrMSS, o.MSS)
	}
	if !h.IPv6 && binary.BigEndian.Uint16(s.hdr[h.L3+6:])&0x4000 != 0 {
		return ErrFragmentDF
	}
	if h.IPv6 {
		// The fragment header goes after the unfragmentable part; only a
		// hop-by-hop header may precede it here.
		s.fragHdr = h.L3 + 40
		if nh := s.hdr[h.L3+6]; nh == 0 {
			s.fragHdr += 8 + int(s.hdr[h.L3+41])*8
			if s.fragHdr != h.L4 {
				return fmt.Errorf("%w: IPv6 extension headers other than hop-by-hop before a fragmented UDP datagram", ErrUnsupported)
			}
		} else if s.fragHdr != h.L4 {
			return fmt.Errorf("%w: IPv6 extension headers other than hop-by-hop before a fragmented UDP datagram", ErrUnsupported)
		}
	}
	if !h.IPv6 && !ipv4OptionsOK(s.hdr[h.L3+20:h.L4]) {
		return fmt.Errorf("%w: malformed IPv4 options", ErrHeader)
	}
	frag := o.MSS &^ 7
	dgram := s.l4len + s.total // UDP header + payload: the fragmentable part
	s.count = max(1, (dgram+frag-1)/frag)
	// RFC 8021: a datagram that fits one packet is not sent as an atomic
	// fragment (a fragment header with offset 0 and M clear).
	s.whole = h.IPv6 && s.count == 1
	// The UDP checksum covers the whole datagram, so compute it up front.
	var a acc
	udp := s.hdr[h.L4 : h.L4+8]
	a.sum = pkt.PseudoSum(s.hdr[h.L3:], h.IPv6, pkt.ProtoUDP, dgram)
	a.add(udp[:4]) // ports; the length is the one each first fragment carries
	a.sum += uint32(dgram)
	for _, v := range s.payload {
		a.add(v)
	}
	c := ^pkt.Fold(a.sum)
	if c == 0 {
		c = 0xFFFF
	}
	s.udpCsum = c
	return nil
}

// fragment builds IP fragment i of a UDP datagram (or, for an IPv6
// datagram that fits one packet, the whole datagram without a fragment
// header).
func (s *Segmenter) fragment(i int, hdr []byte, seg *Segment) {
	h := &s.h
	if s.whole {
		copy(hdr, s.hdr)
		udp := hdr[h.L4:]
		binary.BigEndian.PutUint16(udp[4:], uint16(s.l4len+s.total))
		binary.BigEndian.PutUint16(udp[6:], s.udpCsum)
		seg.Payload = s.take(s.total)
		seg.PayloadLen = s.total
		s.ipHeader(0, hdr, len(hdr)-h.L3+s.total, -1, false)
		return
	}
	frag := s.o.MSS &^ 7
	off := i * frag // offset within the fragmentable part (UDP header + payload)
	dgram := s.l4len + s.total
	n := min(frag, dgram-off) // fragmentable bytes in this fragment
	more := off+n < dgram
	// Copy the unfragmentable part; IPv6 gets a fragment header.
	unfrag := h.L4
	if h.IPv6 {
		unfrag = s.fragHdr
	}
	copy(hdr, s.hdr[:unfrag])
	if !h.IPv6 && i > 0 {
		// RFC 791: only options with the copy flag go in every fragment;
		// the others are in the first only. As Linux does, they become
		// no-operations, so every fragment keeps the header's length.
		nopUncopiedOptions(hdr[h.L3+20 : h.L4])
	}
	o := unfrag
	if h.IPv6 {
		f := hdr[o : o+8]
		// Next header: what followed the unfragmentable part.
		prev := h.L3 + 6
		if s.fragHdr != h.L3+40 {
			prev = h.L3 + 40 // hop-by-hop's next-header byte
		}
		f[0] = s.hdr[prev]
		hdr[prev] = 44
		f[1] = 0
		v := uint16(off)
		if more {
			v |= 1
		}
		binary.BigEndian.PutUint16(f[2:], v)
		binary.BigEndian.PutUint32(f[4:], s.o.FragID)
		o += 8
	}
	payloadBytes := n
	if i == 0 {
		udp := hdr[o : o+8]
		copy(udp, s.hdr[h.L4:h.L4+8])
		binary.BigEndian.PutUint16(udp[4:], uint16(dgram))
		binary.BigEndian.PutUint16(udp[6:], s.udpCsum)
		payloadBytes = n - 8
	}
	seg.Payload = s.take(payloadBytes)
	seg.PayloadLen = payloadBytes
	ipLen := len(hdr) - h.L3 + payloadBytes
	s.ipHeader(0, hdr, ipLen, off, more)
	// Fragments share one IPv4 ID: ipHeader left the original in place.
	s.finishIP(hdr, seg)
}

// ipv4OptionsOK reports whether IPv4 options parse: single-byte End of
// Option List and No Operation, the rest type, length (at least 2), data.
func ipv4OptionsOK(opts []byte) bool {
	for len(opts) > 0 {
		switch opts[0] {
		case 0: // end of option list: the rest is padding
			return true
		case 1:
			opts = opts[1:]
		default:
			if len(opts) < 2 || opts[1] < 2 || int(opts[1]) > len(opts) {
				return false
			}
			opts = opts[opts[1]:]
		}
	}
	return true
}

// nopUncopiedOptions overwrites with No Operation every option of opts
// (already checked by ipv4OptionsOK) whose copy flag (the type's top bit)
// is clear.
func nopUncopiedOptions(opts []byte) {
	for len(opts) > 0 {
		switch opts[0] {
		case 0:
			return
		case 1:
			opts = opts[1:]
		default:
			n := int(opts[1])
			if opts[0]&0x80 == 0 {
				for k := range opts[:n] {
					opts[k] = 1
				}
			}
			opts = opts[n:]
		}
	}
}
