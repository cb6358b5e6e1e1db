//go:build arm

package pkt

import (
	"math/bits"
	"unsafe"
)

// sumAligned returns the 32-bit ones'-complement sum (end-around carry) of
// the little-endian words of b, whose address is 4-byte aligned and whose
// length is a multiple of 4. Implemented in sum_arm.s: sixteen words per
// iteration (four LDMs of four, each word added with ADCS: 23 instructions
// per 64 bytes), then at most one block of eight, then the remaining words
// one at a time.
//
//go:noescape
func sumAligned(b []byte) uint32

// sum32 is Sum for 32-bit ARM, where the portable loop's byte loads,
// byte swaps and 64-bit additions cost about 3.4 instructions per byte
// (measured under QEMU -icount, where the endpoint's software RX checksum
// was the largest single cost of receiving). Ones'-complement sums do not
// depend on byte order (RFC 1071, 2.(B)), so the bulk is summed as native
// little-endian words and the folded result byte-swapped.
func sum32(sum uint32, b []byte) uint32 {
	if len(b) < 16 {
		return sumShort(uint64(sum), b)
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p&1 != 0 {
		return sumGeneric(sum, b) // odd address: the word phase is lost
	}
	s := uint64(sum)
	if p&2 != 0 {
		s += uint64(b[0])<<8 | uint64(b[1]) // an even prefix keeps the 16-bit phase
		b = b[2:]
	}
	// The words after the last 32-byte block too: a 1480-byte TCP segment
	// ends 8 bytes past one, which the portable loop cost about 100
	// instructions to add.
	n := len(b) &^ 3
	le := sumAligned(b[:n])
	le = le>>16 + le&0xFFFF
	le = le>>16 + le&0xFFFF
	// The last 0-3 bytes here rather than in sumGeneric, whose set-up
	// cost more than they do (a frame is summed two or three times).
	return sumShort(s+uint64(bits.ReverseBytes16(uint16(le))), b[n:])
}
