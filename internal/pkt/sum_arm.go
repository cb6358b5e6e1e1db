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

// copySumAligned copies src to dst and returns the 32-bit ones'-complement
// sum of src's little-endian words, as sumAligned. Both addresses are
// 4-byte aligned, src's length is a multiple of 4 and dst is at least as
// long. Implemented in sum_arm.s: sixteen words per iteration (LDM and
// STM of eight twice, 23 instructions per 64 bytes, as many as summing
// alone), then at most one block of eight, then single words.
//
//go:noescape
func copySumAligned(dst, src []byte) uint32

// copySum is CopySum for 32-bit ARM. Copying and summing in one pass
// saves the runtime's memmove (5 instructions per 32 bytes and its
// set-up) when both buffers share their alignment mod 4, as a received
// frame and its NET_IP_ALIGN'd copy do; otherwise it copies, then sums.
func copySum(dst, src []byte) uint32 {
	dst = dst[:len(src)] // panics, as documented, if dst is shorter
	ps := uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	pd := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	if len(src) < 64 || ps&1 != 0 || ps&3 != pd&3 {
		copy(dst, src)
		return sum32(0, src)
	}
	// 32-bit arithmetic throughout (64-bit costs two instructions for
	// one here): the prefix, the folded words and the tail stay far below
	// 2^32.
	var s uint32
	if ps&2 != 0 {
		dst[0], dst[1] = src[0], src[1]
		s = uint32(src[0])<<8 | uint32(src[1])
		dst, src = dst[2:], src[2:]
	}
	n := len(src) &^ 3
	le := copySumAligned(dst[:n], src[:n])
	le = le>>16 + le&0xFFFF
	le = le>>16 + le&0xFFFF
	s += uint32(bits.ReverseBytes16(uint16(le)))
	// The last 0-3 bytes; n is a multiple of 4 past an even start, so
	// src[n] is the high byte of a 16-bit word.
	t, d := src[n:], dst[n:]
	switch len(t) {
	case 3:
		d[2] = t[2]
		s += uint32(t[2]) << 8
		fallthrough
	case 2:
		d[1] = t[1]
		s += uint32(t[1])
		fallthrough
	case 1:
		d[0] = t[0]
		s += uint32(t[0]) << 8
	}
	s = s>>16 + s&0xFFFF
	return s>>16 + s&0xFFFF
}
