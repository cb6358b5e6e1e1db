package connectx

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Words shared with the card while it runs (doorbell records, the last word
// of CQEs and EQEs, the command entry's status word) are accessed as single
// aligned 32-bit loads and stores, as the card sees them: a record is
// published by one store after the entries it covers, and an entry's
// op_own word is read before the rest of it.

func word(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// storeBE32 publishes v as a big-endian word at b[off] in one store.
func storeBE32(b []byte, off int, v uint32) {
	var t [4]byte
	binary.BigEndian.PutUint32(t[:], v)
	atomic.StoreUint32(word(b, off), binary.NativeEndian.Uint32(t[:]))
}

// loadBytes returns the 4 bytes at b[off] read in one load.
func loadBytes(b []byte, off int) [4]byte {
	var t [4]byte
	binary.NativeEndian.PutUint32(t[:], atomic.LoadUint32(word(b, off)))
	return t
}

// lastByte returns byte 63 of a 64-byte entry (op_own, owner in bit 0).
func lastByte(e []byte) uint8 { return loadBytes(e, 60)[3] }
