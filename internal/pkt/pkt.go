// Package pkt locates the L3 and L4 headers of an Ethernet frame and
// computes Internet checksums. It is the minimum the NIC code needs to
// place or verify checksum fields; it is not a general packet decoder, and
// tests verify its users with an independent one (gopacket).
package pkt

import (
	"encoding/binary"
	"errors"
)

// EtherTypes.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100
	EtherTypeQinQ = 0x88A8
)

// IP protocol numbers.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// Errors.
var (
	ErrTruncated = errors.New("pkt: truncated header")
	ErrNotIP     = errors.New("pkt: not IPv4 or IPv6")
	ErrMalformed = errors.New("pkt: malformed header")
)

// Headers are the offsets of a frame's headers.
type Headers struct {
	L3, L4 int  // offsets of the IP and transport headers
	Proto  int  // transport protocol
	IPv6   bool // else IPv4
	// Fragment: an IP fragment; no transport checksum can be computed from
	// it alone. For IPv6, L4 is then the start of the fragmentable part
	// (the fragment header is the 8 bytes before it) and Proto the first
	// header in it.
	Fragment bool
	VLANs    int // 802.1Q/802.1ad tags skipped
	// CsumOff is the offset of the transport checksum field, or -1 when the
	// protocol has none the NIC handles (anything but TCP and UDP, or a
	// fragment).
	CsumOff int
	// IPEnd is where the IP datagram ends according to its length field.
	IPEnd int
}

// Parse locates the headers of an Ethernet frame f (no FCS).
func Parse(f []byte) (Headers, error) {
	var h Headers
	err := h.Parse(f)
	return h, err
}

// Parse is the package's Parse filling in *h, for a receive path that
// keeps its Headers in place (on 32-bit ARM each copy of its eight words
// is a duffcopy call).
func (h *Headers) Parse(f []byte) error {
	*h = Headers{CsumOff: -1}
	if len(f) < 14 {
		return ErrTruncated
	}
	off := 12
	et := int(binary.BigEndian.Uint16(f[off:]))
	for (et == EtherTypeVLAN || et == EtherTypeQinQ) && h.VLANs < 2 {
		off += 4
		if len(f) < off+2 {
			return ErrTruncated
		}
		et = int(binary.BigEndian.Uint16(f[off:]))
		h.VLANs++
	}
	h.L3 = off + 2
	switch et {
	case EtherTypeIPv4:
		if len(f) < h.L3+20 {
			return ErrTruncated
		}
		ip := f[h.L3:]
		ihl := int(ip[0]&0xF) * 4
		if ip[0]>>4 != 4 || ihl < 20 {
			return ErrMalformed
		}
		if len(ip) < ihl {
			return ErrTruncated
		}
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot < ihl {
			return ErrMalformed
		}
		h.IPEnd = h.L3 + tot
		h.Proto = int(ip[9])
		h.L4 = h.L3 + ihl
		frag := binary.BigEndian.Uint16(ip[6:])
		h.Fragment = frag&0x3FFF != 0 // MF or a non-zero offset
	case EtherTypeIPv6:
		if len(f) < h.L3+40 {
			return ErrTruncated
		}
		ip := f[h.L3:]
		if ip[0]>>4 != 6 {
			return ErrMalformed
		}
		h.IPv6 = true
		h.IPEnd = h.L3 + 40 + int(binary.BigEndian.Uint16(ip[4:]))
		// Walk the whole extension-header chain, however long (each header
		// is at least 8 bytes, so the frame bounds the walk). A transport
		// header behind a long chain still has a checksum that somebody
		// must verify. The headers walked are exactly those gVisor's
		// IPv6PayloadIterator walks (ExtHeaderLen): the transport header
		// found here is the one gVisor hands to TCP or UDP.
		next, o := int(ip[6]), h.L3+40
	chain:
		for {
			switch next {
			case 0, 43, 60, 253: // hop-by-hop, routing, destination options, experiment
				if len(f) < o+8 {
					return ErrTruncated
				}
				next, o = int(f[o]), o+ExtHeaderLen(next, f[o+1])
			case 44: // fragment
				if len(f) < o+8 {
					return ErrTruncated
				}
				fo := binary.BigEndian.Uint16(f[o+2:])
				next, o = int(f[o]), o+8
				if fo&0xFFF9 != 0 {
					// A real fragment: what follows is the fragmentable
					// part (in later fragments, payload bytes, not
					// headers). L4 is where it starts, just after the
					// fragment header; Proto is its first header.
					h.Fragment = true
					break chain
				}
			default:
				break chain
			}
		}
		if o > len(f) {
			return ErrTruncated // extension headers run past the frame
		}
		h.Proto, h.L4 = next, o
	default:
		return ErrNotIP
	}
	if h.Fragment {
		return nil
	}
	switch h.Proto {
	case ProtoTCP:
		h.CsumOff = h.L4 + 16
	case ProtoUDP:
		h.CsumOff = h.L4 + 6
	}
	return nil
}

// ExtHeaderLen is the length of an IPv6 extension header of type next
// (0, 43, 60 or 253) whose Hdr Ext Len field is hlen, as gVisor walks it
// (pkg/tcpip/header/ipv6_extension_headers.go, IPv6PayloadIterator.Next):
// 8 bytes plus hlen units of 8 (RFC 8200 4.3-4.6), except for the RFC 4727
// experiment header 253, which gVisor reads as a fixed 8 bytes whatever
// its length field says. gVisor walks no other header numbers (44, the
// fragment header, is 8 bytes; 59 ends the packet; 254 and the rest are
// upper-layer protocols to it), so neither does this package.
func ExtHeaderLen(next int, hlen byte) int {
	if next == 253 {
		return 8
	}
	return 8 + int(hlen)*8
}

// Sum adds b to a running ones'-complement sum (RFC 1071), treating b as
// big-endian 16-bit words; an odd trailing byte is padded with zero. The
// result is folded to 16 bits (not complemented), so callers may keep
// adding small values before Fold. Since 2^16 = 1 mod 0xFFFF, 32-bit words
// summed in 64 bits give the same result as 16-bit words.
func Sum(sum uint32, b []byte) uint32 { return sum32(sum, b) }

// sumGeneric is Sum in portable Go.
func sumGeneric(sum uint32, b []byte) uint32 {
	s := uint64(sum)
	for len(b) >= 32 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[20:])) +
			uint64(binary.BigEndian.Uint32(b[24:])) + uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	return sumShort(s, b)
}

// sumShort adds the big-endian 16-bit words of b (an odd last byte as the
// high byte of a word) to s and folds the result to 16 bits: the tail of
// every sum, and on ARM the whole of short ones (a pseudo-header), without
// sumGeneric's set-up.
func sumShort(s uint64, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint32(s)
}

// CopySum copies src into dst and returns Sum(0, src): one pass over the
// bytes where the architecture allows (32-bit ARM, when src and dst share
// their address alignment mod 4), a copy and a sum elsewhere. It panics if
// dst is shorter than src.
func CopySum(dst, src []byte) uint32 { return copySum(dst, src) }

// Fold folds a running sum to 16 bits (not complemented).
func Fold(sum uint32) uint16 {
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// IPv4HeaderOK reports whether the IPv4 header checksum of frame f (headers
// *h) is valid; it is true for IPv6, which has none. The verifiers take
// Headers by pointer: on 32-bit ARM each copy of its eight words was a
// duffcopy call per received frame.
func IPv4HeaderOK(f []byte, h *Headers) bool {
	return h.IPv6 || Fold(Sum(0, f[h.L3:h.L4])) == 0xFFFF
}

// TransportOK verifies the TCP or UDP checksum (pseudo-header included) of
// frame f, whose IP datagram must lie within f (h.IPEnd <= len(f)).
// checked is false when there is nothing to verify: no checksum field (an
// IP fragment, another protocol), a field past the datagram, or IPv4 UDP
// sent without a checksum (field 0).
func TransportOK(f []byte, h *Headers) (ok, checked bool) {
	if !transportSummed(f, h) {
		return false, false
	}
	return summedOK(f, h, Sum(0, f[h.L4:h.IPEnd])), true
}

// TransportSumOK is TransportOK for a caller that has already summed the
// segment f[h.L4:h.IPEnd] (segSum, as Sum(0, segment) or CopySum return
// it), say while copying it.
func TransportSumOK(f []byte, h *Headers, segSum uint32) (ok, checked bool) {
	if !transportSummed(f, h) {
		return false, false
	}
	return summedOK(f, h, segSum), true
}

// summedOK reports whether segSum, the sum of frame f's TCP or UDP
// segment, with the pseudo-header added folds to all ones.
func summedOK(f []byte, h *Headers, segSum uint32) bool {
	return Fold(segSum+PseudoSum(f[h.L3:], h.IPv6, h.Proto, h.IPEnd-h.L4)) == 0xFFFF
}

// transportSummed reports whether frame f (headers h) carries a TCP or UDP
// checksum to verify, within its datagram.
func transportSummed(f []byte, h *Headers) bool {
	if h.CsumOff < 0 || h.CsumOff+2 > h.IPEnd || h.L4 > h.IPEnd {
		return false
	}
	return h.Proto != ProtoUDP || h.IPv6 || binary.BigEndian.Uint16(f[h.CsumOff:]) != 0
}

// PseudoSum returns the sum of the transport pseudo-header of the IP header
// at ip for an L4 segment of l4len bytes.
func PseudoSum(ip []byte, v6 bool, proto, l4len int) uint32 {
	var s uint32
	if v6 {
		s = Sum(0, ip[8:40])
	} else {
		// The two IPv4 addresses as four 16-bit words, without Sum's
		// set-up (a received segment's checksum needs this once).
		a := ip[12:20]
		s = uint32(binary.BigEndian.Uint16(a)) + uint32(binary.BigEndian.Uint16(a[2:])) +
			uint32(binary.BigEndian.Uint16(a[4:])) + uint32(binary.BigEndian.Uint16(a[6:]))
		s = s>>16 + s&0xFFFF
		s = s>>16 + s&0xFFFF // at most 0xFFFF, as Sum returns
	}
	return s + uint32(proto) + uint32(l4len)
}
