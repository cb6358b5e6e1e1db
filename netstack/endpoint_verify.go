package netstack

import (
	"gvisor.dev/gvisor/pkg/buffer"

	"github.com/tamanic/tamanic/internal/pkt"
)

// copyVerified is softVerify of frame b followed by its copy (alignedView)
// when the verdict is not bad, with the TCP or UDP checksum, where it is
// checked here, verified on the sum taken while copying. The copy holds
// the IP datagram without the link layer's padding (a frame under 60
// bytes is padded with zeros on the wire): gVisor's GRO takes a segment's
// payload length from the buffer, not the IP header, so it merged a
// padded pure ACK into the preceding data segment of its connection as 6
// bytes of data (the QEMU soak's corrupted sink transfers). A bad frame
// gets no view. The frame's headers are left in *h (filled in place: a
// Headers is eight words, and each copy of one cost a duffcopy per frame).
func (e *Endpoint) copyVerified(h *pkt.Headers, b []byte, ipOK, l4OK bool) (*buffer.View, verdict) {
	hv, l4 := e.verifyHeaders(h, b, ipOK, l4OK)
	if hv == verdictBad {
		return nil, hv
	}
	b = b[:h.IPEnd]
	if !l4 {
		return alignedView(b), hv
	}
	v, sum := alignedViewSum(b, h.L4)
	ok, checked := pkt.TransportSumOK(v.AsSlice(), h, sum)
	if hv = transportVerdict(ok, checked, h.Proto == pkt.ProtoTCP || h.IPv6); hv == verdictBad {
		v.Release()
		return nil, hv
	}
	return v, hv
}

type verdict int

// softVerify checks in software the IPv4 header and TCP/UDP checksums the
// hardware did not verify. It is the only check these packets get: with
// RX offload advertised, gVisor trusts every checksum. Fragments (of any
// protocol, IPv4 or IPv6) are left to fragCheck, which sees the whole
// datagram (h.Fragment is set). A frame it cannot parse is bad: gVisor
// could not parse it either, but the endpoint does not bet a checksum on
// that.
func (e *Endpoint) softVerify(f []byte, ipOK, l4OK bool) (pkt.Headers, verdict) {
	var h pkt.Headers
	v, l4 := e.verifyHeaders(&h, f, ipOK, l4OK)
	if l4 {
		ok, checked := pkt.TransportOK(f, &h)
		v = transportVerdict(ok, checked, h.Proto == pkt.ProtoTCP || h.IPv6)
	}
	return h, v
}

// verifyHeaders is softVerify up to the TCP or UDP checksum: it parses f
// into *h and checks its IPv4 header sum unless ipOK, and reports in l4 whether
// the segment's checksum is still to be verified (a TCP or UDP segment,
// not a fragment, not verified by the hardware, or over IPv6 behind
// extension headers); then the verdict is transportVerdict's, not v.
func (e *Endpoint) verifyHeaders(h *pkt.Headers, f []byte, ipOK, l4OK bool) (v verdict, l4 bool) {
	if err := h.Parse(f); err != nil || h.IPEnd > len(f) || h.IPEnd < h.L4 {
		*h = pkt.Headers{CsumOff: -1}
		return verdictBad, false
	}
	v = verdictHW
	if !h.IPv6 && !ipOK {
		v = verdictSoft
		if !pkt.IPv4HeaderOK(f, h) {
			return verdictBad, false
		}
	}
	if h.Fragment {
		return v, false // fragCheck verifies the datagram
	}
	if h.Proto != pkt.ProtoTCP && h.Proto != pkt.ProtoUDP {
		return v, false // delivered with no verdict (deliverUnverified)
	}
	// The hardware's verdict counts only where it cannot have checked
	// another header than the one gVisor reads: behind an IPv6 extension
	// header a NIC may walk differently (gVisor reads 253 as 8 bytes
	// whatever its length field says), so that segment is checked here.
	return v, !l4OK || h.IPv6 && h.L4 != h.L3+40
}

// transportVerdict turns pkt.TransportOK's answer for a segment into a
// verdict: bad for a bad sum, or no sum where one is required (required:
// TCP always, UDP over IPv6, RFC 8200 8.1), or a header cut short; else
// soft.
func transportVerdict(ok, checked, required bool) verdict {
	if !ok && (checked || required) {
		return verdictBad
	}
	return verdictSoft
}
