// Package loopframe builds and recognises the frames of the NIC drivers'
// loopback self-tests (fec.NIC.SelfTest, e1000e.NIC.SelfTest): UDP/IPv4
// frames from the NIC's own MAC address to itself, between the link-local
// address 169.254.0.1 and itself, port 9 (discard, RFC 863) to port 9, so
// that a frame that leaks onto a wire reaches nobody's service.
package loopframe

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/tamanic/tamanic/internal/pkt"
)

// Sizes are the frame lengths (without FCS) of the frame set: the minimum,
// around the word and cache-line boundaries, and the maximum.
var Sizes = []int{60, 61, 62, 63, 64, 65, 100, 127, 128, 255, 256, 511, 512, 1023, 1024, 1513, 1514}

// Frame is one frame of the set.
type Frame struct {
	// Want is the frame as it must come back, checksums computed in
	// software; Frags the fragments to send (copies of Want's bytes).
	Want  []byte
	Frags [][]byte
	// Desc lists the fragments' lengths and word offsets (" 42@1 9@2").
	Desc string
	// Bad: sent with a wrong UDP checksum, as it is (no insertion): it
	// must come back unchanged and no checksum verdict may claim it.
	Bad bool
}

// Set returns the frame set for mac: a frame of each of Sizes (IP ID its
// index) as its 42 bytes of headers and its payload in up to two pieces,
// fragment j of frame i starting at word offset (i+j)%4 of its own
// allocation; then two frames of 100 and 1,000 bytes with a wrong UDP
// checksum, which take the IDs after the good ones.
func Set(mac [6]byte) []Frame {
	frames := make([]Frame, 0, len(Sizes)+2)
	for i, size := range Sizes {
		want := make([]byte, size)
		UDP(want, mac, uint16(i), byte(i)*37+1)
		f := Frame{Want: want}
		cuts := []int{0, 42, 42 + (size-42)/2, size}
		for j := 0; j+1 < len(cuts); j++ {
			lo, hi := cuts[j], cuts[j+1]
			if hi == lo {
				continue
			}
			off := (i + j) % 4
			b := make([]byte, hi-lo+8)[off : off+hi-lo]
			copy(b, want[lo:hi])
			f.Frags = append(f.Frags, b)
			f.Desc += fmt.Sprintf(" %d@%d", hi-lo, off)
		}
		frames = append(frames, f)
	}
	for k, size := range []int{100, 1000} {
		want := make([]byte, size)
		UDP(want, mac, uint16(len(frames)), byte(k)+7)
		want[40] ^= 0x5a
		b := append([]byte(nil), want...)
		frames = append(frames, Frame{Want: want, Frags: [][]byte{b}, Desc: fmt.Sprintf(" %d@0 (bad UDP checksum)", size), Bad: true})
	}
	return frames
}

// linkLocal is the frames' source and destination address.
var linkLocal = [4]byte{169, 254, 0, 1}

// UDP writes into f (len(f) >= 42) a UDP/IPv4 frame of the set from and to
// mac, with IP ID id, its payload counting up from seed, and both
// checksums.
func UDP(f []byte, mac [6]byte, id uint16, seed byte) {
	copy(f[0:], mac[:])
	copy(f[6:], mac[:])
	binary.BigEndian.PutUint16(f[12:], pkt.EtherTypeIPv4)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, pkt.ProtoUDP
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	binary.BigEndian.PutUint16(ip[4:], id)
	copy(ip[12:], linkLocal[:])
	copy(ip[16:], linkLocal[:])
	binary.BigEndian.PutUint16(ip[10:], ^pkt.Fold(pkt.Sum(0, ip)))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], 9) // discard (RFC 863)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	for k := 8; k < len(udp); k++ {
		udp[k] = seed + byte(k)
	}
	c := ^pkt.Fold(pkt.Sum(pkt.PseudoSum(ip, false, pkt.ProtoUDP, len(udp)), udp))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// Is reports whether f is a self-test frame of the NIC with address mac
// (from and to mac, IPv4 between the set's addresses): anything else that
// a NIC receives during its test came from elsewhere.
func Is(f []byte, mac [6]byte) bool {
	return len(f) >= 34 && [6]byte(f[0:6]) == mac && [6]byte(f[6:12]) == mac &&
		binary.BigEndian.Uint16(f[12:]) == pkt.EtherTypeIPv4 &&
		[4]byte(f[26:30]) == linkLocal && [4]byte(f[30:34]) == linkLocal
}

// FirstDiff returns the first index at which a and b differ, or -1 when
// they are equal over the shorter one's length.
func FirstDiff(a, b []byte) int {
	for k := range min(len(a), len(b)) {
		if a[k] != b[k] {
			return k
		}
	}
	return -1
}

// The TSO packet's constants: its MSS, first sequence number and first
// IPv4 ID.
const (
	MSS  = 1448
	Seq0 = 0x01000000
	ID0  = 0x5000
)

// TSO is the self-tests' TCP packet for a segmenter (software TSO or the
// controller's) and the check of the segments that come back.
type TSO struct {
	// Hdr is the packet's 54 bytes of Ethernet, IPv4 and TCP headers
	// (PSH and ACK, checksums left for the segmenter), Payload its
	// payload, Segs the segments it makes at MSS.
	Hdr, Payload []byte
	Segs         int
	back         []byte
}

// NewTSO returns a TCP/IPv4 packet of size payload bytes from and to mac
// (the set's addresses, port 5201 to 5201).
func NewTSO(mac [6]byte, size int) *TSO {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	hdr := make([]byte, 54)
	copy(hdr[0:], mac[:])
	copy(hdr[6:], mac[:])
	binary.BigEndian.PutUint16(hdr[12:], pkt.EtherTypeIPv4)
	ip := hdr[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, pkt.ProtoTCP
	binary.BigEndian.PutUint16(ip[2:], uint16(40+size))
	binary.BigEndian.PutUint16(ip[4:], ID0)
	copy(ip[12:], linkLocal[:])
	copy(ip[16:], linkLocal[:])
	tcp := hdr[34:54]
	binary.BigEndian.PutUint16(tcp[0:], 5201)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	binary.BigEndian.PutUint32(tcp[4:], Seq0)
	tcp[12], tcp[13] = 5<<4, 0x18 // PSH, ACK
	binary.BigEndian.PutUint16(tcp[14:], 0xffff)
	return &TSO{Hdr: hdr, Payload: payload, Segs: (size + MSS - 1) / MSS, back: make([]byte, 0, size)}
}

// Segment checks segment i (frame f) against what a segmenter must write
// (Linux tso_build_hdr; the 82574 datasheet's TCP segmentation): its
// sequence number continuing the payload so far, the L2 header and
// addresses as given, the IPv4 ID counting up from ID0, ACK on every
// segment and PSH only on the last (no FIN, SYN or RST), MSS bytes of
// payload but in the last, nothing past the IP datagram, and both
// checksums right on the wire. It keeps the segment's payload for Finish
// and returns every problem found, in order (none: nil), and whether f
// was a TCP/IPv4 segment at all (if not, nothing else was checked).
func (t *TSO) Segment(i int, f []byte) (bad []string, tcp bool) {
	h, err := pkt.Parse(f)
	if err != nil || h.Proto != pkt.ProtoTCP || h.IPEnd > len(f) || h.IPv6 || h.Fragment {
		return []string{fmt.Sprintf("segment %d: not a TCP/IPv4 segment (%d bytes): %v", i, len(f), err)}, false
	}
	if seq, want := binary.BigEndian.Uint32(f[h.L4+4:]), uint32(Seq0+len(t.back)); seq != want {
		bad = append(bad, fmt.Sprintf("segment %d: sequence %#x, want %#x", i, seq, want))
	}
	hdr := t.Hdr
	flags := byte(0x10)
	if i == t.Segs-1 {
		flags |= 0x08
	}
	switch {
	case h.L3 != 14 || h.L4 != 34 || !bytes.Equal(f[:14], hdr[:14]):
		bad = append(bad, fmt.Sprintf("segment %d: L2 header % x, want % x", i, f[:min(len(f), 14)], hdr[:14]))
	case len(f) != h.IPEnd:
		bad = append(bad, fmt.Sprintf("segment %d: %d bytes past the IP datagram", i, len(f)-h.IPEnd))
	case binary.BigEndian.Uint16(f[18:]) != ID0+uint16(i):
		bad = append(bad, fmt.Sprintf("segment %d: IPv4 ID %#x, want %#x", i, binary.BigEndian.Uint16(f[18:]), ID0+i))
	case f[14] != 0x45 || f[22] != 64 || !bytes.Equal(f[20:22], hdr[20:22]) || !bytes.Equal(f[26:34], hdr[26:34]):
		bad = append(bad, fmt.Sprintf("segment %d: IPv4 header % x against % x", i, f[14:34], hdr[14:34]))
	case !bytes.Equal(f[34:38], hdr[34:38]) || !bytes.Equal(f[42:46], hdr[42:46]) || f[46] != hdr[46] ||
		!bytes.Equal(f[48:50], hdr[48:50]) || !bytes.Equal(f[52:54], hdr[52:54]):
		bad = append(bad, fmt.Sprintf("segment %d: TCP header % x against % x", i, f[34:54], hdr[34:54]))
	case f[47] != flags:
		bad = append(bad, fmt.Sprintf("segment %d: TCP flags %#02x, want %#02x", i, f[47], flags))
	}
	data := f[h.L4+int(f[h.L4+12]>>4)*4 : h.IPEnd]
	if i < t.Segs-1 && len(data) != MSS {
		bad = append(bad, fmt.Sprintf("segment %d: %d bytes of payload, want the MSS %d", i, len(data), MSS))
	}
	t.back = append(t.back, data...)
	if ok, checked := pkt.TransportOK(f, &h); !ok || !checked || !pkt.IPv4HeaderOK(f, &h) {
		bad = append(bad, fmt.Sprintf("segment %d: checksum wrong on the wire (tcp ok %v, ip ok %v)", i, ok, pkt.IPv4HeaderOK(f, &h)))
	}
	return bad, true
}

// Finish compares the payload the segments brought back with the
// packet's: "" when it is all there and equal, else what differs (when
// bytes are missing and anything was already reported, "" too: the
// segment checks said why).
func (t *TSO) Finish(reported bool) string {
	if len(t.back) != len(t.Payload) {
		if reported {
			return ""
		}
		return fmt.Sprintf("%d of %d payload bytes came back", len(t.back), len(t.Payload))
	}
	if k := FirstDiff(t.back, t.Payload); k >= 0 {
		return fmt.Sprintf("payload byte %d (segment %d, offset %d) is %#02x, sent %#02x", k, k/MSS, k%MSS, t.back[k], t.Payload[k])
	}
	return ""
}

// Returns checks the frames of a set as they come back.
type Returns struct {
	frames []Frame
	back   []bool
}

// NewReturns returns the check of frames (a Set).
func NewReturns(frames []Frame) *Returns {
	return &Returns{frames: frames, back: make([]bool, len(frames))}
}

// Frame checks a frame that came back, got, with the L4 checksum verdict
// the NIC gave it: which frame it is (its IP ID), that it came back once,
// whole and byte for byte as sent (the first difference named with its
// offset: a stale cache line shows there), and that a frame sent with a
// wrong UDP checksum is not claimed verified. It returns the frame's
// index, or -1 when got is no frame of the set, and the first problem
// ("" when none; the caller then checks the verdicts).
func (r *Returns) Frame(got []byte, l4Claimed bool) (int, string) {
	if len(got) < 20 {
		return -1, fmt.Sprintf("a %d-byte frame came back", len(got))
	}
	id := int(binary.BigEndian.Uint16(got[18:]))
	if id >= len(r.frames) {
		return -1, fmt.Sprintf("a frame with IP ID %d came back; none was sent", id)
	}
	f := r.frames[id]
	if r.back[id] {
		return id, fmt.Sprintf("frame %d came back twice", id)
	}
	r.back[id] = true
	if len(got) != len(f.Want) {
		return id, fmt.Sprintf("frame %d came back with %d bytes, sent %d (fragments%s)", id, len(got), len(f.Want), f.Desc)
	}
	if k := FirstDiff(got, f.Want); k >= 0 {
		return id, fmt.Sprintf("frame %d (%d bytes, fragments%s): byte %d is %#02x, sent %#02x", id, len(f.Want), f.Desc, k, got[k], f.Want[k])
	}
	if f.Bad && l4Claimed {
		return id, fmt.Sprintf("frame %d: a wrong UDP checksum claimed verified", id)
	}
	return id, ""
}

// Missing names the first frame that did not come back ("" when all
// did).
func (r *Returns) Missing() string {
	for id, ok := range r.back {
		if !ok {
			f := r.frames[id]
			return fmt.Sprintf("frame %d (%d bytes, fragments%s) did not come back", id, len(f.Want), f.Desc)
		}
	}
	return ""
}
