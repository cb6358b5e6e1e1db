// Package loopframe builds and recognises the frames of the NIC drivers'
// loopback self-tests (fec.NIC.SelfTest, e1000e.NIC.SelfTest): UDP/IPv4
// frames from the NIC's own MAC address to itself, between the link-local
// address 169.254.0.1 and itself, port 9 (discard, RFC 863) to port 9, so
// that a frame that leaks onto a wire reaches nobody's service.
package loopframe

import (
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
