// Package netcall is the world-call protocol of the TrustZone-partitioned
// firmware: the ENET driver (package fec, software TSO) runs in the Secure
// World, gVisor and the services run in the Normal World, and a
// netstack.Device in the Normal World (Device) reaches the driver through
// secure monitor calls (SMC) served by Server in the Secure World.
//
// # Calls
//
// A call is four 32-bit registers in (r0 the operation, r1-r3 its
// arguments) and two out (r0 a Status, r1 a value), as GoTEE's monitor
// sees them (ExecCtx.R0-R3, ExecCtx.Ret). Data moves through the transfer
// region: Normal World memory both worlds map, whose base and size the
// Secure World fixes at build time (the Normal World never tells it where
// the region is, only offsets into it).
//
//   - OpTransmit(off, len, 0): one frame or one GSO packet. The TX
//     descriptor (TxDesc, little endian) is the len bytes at off; it names
//     the header and payload as extents of the region. The Secure World
//     copies the descriptor and then every extent into its own memory
//     before it looks at a byte, so a Normal World that changes the region
//     during the call changes nothing, and the copy is what the driver
//     segments and DMAs: on return the Normal World owns the region again.
//   - OpReceive(off, len, max): up to max received frames are written at
//     off as records (RxRecordHeader bytes of length and checksum verdicts,
//     then the frame, padded to 4 bytes); r1 is the count.
//   - OpInfo(off, len, 0): the device's description (InfoSize bytes).
//   - OpStats(off, len, 0): the Secure World's counters as JSON; r1 is the
//     length.
//   - OpMode(strategy, 0, 0): the driver's TX placement: 0 bounce (every
//     frame copied into a driver buffer), 1 scatter-gather (the staging
//     buffer mapped in place). Only performance changes.
//   - OpWait(us, 0, 0): the Normal World has nothing to do for up to us
//     microseconds (at most MaxWaitMicros): the Secure World waits for a
//     received frame (r1 = WaitRx), for a staging buffer to come back
//     after it answered a transmit StatusFull (r1 = WaitFreed: the
//     Normal World holds that transmission and retries it), or the time
//     (r1 = 0), idle meanwhile. It is the Normal World's idle governor:
//     the core sleeps in the Secure World, which the NIC's interrupt
//     wakes.
//   - OpRandom(0, 0, 0): r1 is 32 bits from the Secure World's random
//     source (on the i.MX6ULL its RNGB, which the CSU keeps from the
//     Normal World). It is the Normal World's only entropy: its runtime
//     seeds and crypto/rand read through it, 4 bytes a call, in registers
//     so that no two callers can ever share bytes left in memory.
//
// # Validation
//
// Every offset, length and count is checked against the region with 64-bit
// arithmetic before use; a call that fails a check is refused with a
// Status naming the check, counted in ServerStats.Refused, and changes
// nothing: no byte outside the region is read or written, no staging
// buffer is kept, the driver is not called. A packet the checks pass but
// the driver refuses ("never": headers it cannot parse) is refused with
// StatusRefused and counted too.
package netcall

import (
	"encoding/binary"
	"fmt"
)

// Op is a world-call operation number (r0 of the SMC). The numbers sit
// clear of GoTEE's own (syscall.SYS_EXIT...SYS_RPC_RES are 0-5).
type Op uint32

// Operations.
const (
	OpInfo     Op = 0x544e0001
	OpTransmit Op = 0x544e0002
	OpReceive  Op = 0x544e0003
	OpStats    Op = 0x544e0004
	OpWait     Op = 0x544e0005
	OpMode     Op = 0x544e0006
	OpRandom   Op = 0x544e0007
)

func (o Op) String() string {
	switch o {
	case OpInfo:
		return "info"
	case OpTransmit:
		return "transmit"
	case OpReceive:
		return "receive"
	case OpStats:
		return "stats"
	case OpWait:
		return "wait"
	case OpMode:
		return "mode"
	case OpRandom:
		return "random"
	}
	return fmt.Sprintf("op%#x", uint32(o))
}

// Status is a call's result (r0 on return). Every non-OK status is also an
// error, so the Normal World can return it and test it with errors.Is.
type Status uint32

// Statuses.
const (
	StatusOK Status = iota
	// StatusFull: not now (the TX ring or the staging buffers are full);
	// the same call succeeds once transmissions complete.
	StatusFull
	// StatusBadOp: unknown operation.
	StatusBadOp
	// StatusBadRange: an offset or extent outside the transfer region (or
	// one whose end overflows).
	StatusBadRange
	// StatusBadCount: an extent or frame count beyond the protocol's limits.
	StatusBadCount
	// StatusBadLength: a length that does not match the descriptor, too
	// short to hold what the call writes, or beyond the packet limits.
	StatusBadLength
	// StatusBadField: a descriptor field with no meaning (kind, type,
	// flags, MSS).
	StatusBadField
	// StatusRefused: the driver refused a well-formed request for good
	// (headers it cannot segment, a packet beyond the ring).
	StatusRefused
	// StatusClosed: the NIC is closed.
	StatusClosed
	numStatus
)

var statusNames = [...]string{"ok", "full", "bad-op", "bad-range", "bad-count", "bad-length", "bad-field", "refused", "closed"}

func (s Status) String() string {
	if s < numStatus {
		return statusNames[s]
	}
	return fmt.Sprintf("status%d", uint32(s))
}

// Error implements error.
func (s Status) Error() string { return "netcall: " + s.String() }

// Limits of the protocol, the same on both sides.
const (
	// MaxExtents is the most extents (header and payload pieces) one TX
	// descriptor may name.
	MaxExtents = 8
	// MaxHeader is the longest L2-L4 header of a GSO packet.
	MaxHeader = 256
	// MaxGSOPayload is the most payload bytes of one GSO packet (gVisor's
	// GVisorGSOMaxSize).
	MaxGSOPayload = 1 << 16
	// MaxRxBatch is the most frames one OpReceive may ask for.
	MaxRxBatch = 64
	// RxRecordHeader is the size of a received frame's record header:
	// length (uint16) and verdict flags (uint16).
	RxRecordHeader = 4
	// MaxWaitMicros bounds OpWait.
	MaxWaitMicros = 100_000
	// InfoSize is the length of OpInfo's answer.
	InfoSize = 24
	// TxDescHeader is the fixed part of a TX descriptor; each extent adds
	// TxExtentSize.
	TxDescHeader = 16
	TxExtentSize = 8
)

// OpWait's answers (r1) other than 0 (the time ran out).
const (
	WaitRx    = 1 // a received frame signalled
	WaitFreed = 2 // a staging buffer came back after a StatusFull answer
)

// OpMode's strategies.
const (
	ModeBounce = 0
	ModeSG     = 1
)

// Descriptor kinds.
const (
	KindFrame = 1 // extents are one frame's fragments
	KindGSO   = 2 // extent 0 is the header, the rest (none for an ACK or FIN) the payload
)

// Descriptor flags.
const (
	FlagCsum      = 1 << 0 // KindFrame: insert IPv4 and TCP/UDP checksums
	FlagNeedsCsum = 1 << 1 // KindGSO: the checksum field holds a partial sum
	flagsKnown    = FlagCsum | FlagNeedsCsum
)

// GSO types on the wire.
const (
	GSONone = 0
	GSOTCP  = 1
)

// RX record flags.
const (
	RxIPv4OK = 1 << 0 // IPv4 header checksum verified by the MAC
	RxL4OK   = 1 << 1 // TCP/UDP checksum verified by the MAC
)

// Extent is a piece of the transfer region.
type Extent struct{ Off, Len uint32 }

// TxDesc is a TX descriptor: TxDescHeader bytes, then the extents.
//
//	0  uint8  Kind
//	1  uint8  Flags
//	2  uint8  GSOType
//	3  uint8  number of extents
//	4  uint16 MSS
//	6  uint16 CsumOffset
//	8  uint32 reserved (0)
//	12 uint32 reserved (0)
//	16 extents: uint32 offset, uint32 length
type TxDesc struct {
	Kind, Flags, GSOType uint8
	MSS, CsumOffset      uint16
	Extents              []Extent
}

// Size is the encoded length of d.
func (d *TxDesc) Size() int { return TxDescHeader + TxExtentSize*len(d.Extents) }

// Encode writes d into b, which must hold Size bytes.
func (d *TxDesc) Encode(b []byte) {
	b[0], b[1], b[2], b[3] = d.Kind, d.Flags, d.GSOType, uint8(len(d.Extents))
	le.PutUint16(b[4:], d.MSS)
	le.PutUint16(b[6:], d.CsumOffset)
	le.PutUint32(b[8:], 0)
	le.PutUint32(b[12:], 0)
	for i, e := range d.Extents {
		le.PutUint32(b[TxDescHeader+TxExtentSize*i:], e.Off)
		le.PutUint32(b[TxDescHeader+TxExtentSize*i+4:], e.Len)
	}
}

// decodeTxDesc parses a descriptor already copied out of the region; ext
// is reused for the extents.
func decodeTxDesc(b []byte, ext []Extent) (TxDesc, Status) {
	if len(b) < TxDescHeader {
		return TxDesc{}, StatusBadLength
	}
	d := TxDesc{Kind: b[0], Flags: b[1], GSOType: b[2], MSS: le.Uint16(b[4:]), CsumOffset: le.Uint16(b[6:])}
	n := int(b[3])
	if n == 0 || n > MaxExtents {
		return TxDesc{}, StatusBadCount
	}
	if len(b) != TxDescHeader+TxExtentSize*n {
		return TxDesc{}, StatusBadLength
	}
	if le.Uint32(b[8:]) != 0 || le.Uint32(b[12:]) != 0 || d.Flags&^flagsKnown != 0 {
		return TxDesc{}, StatusBadField
	}
	ext = ext[:0]
	for i := range n {
		ext = append(ext, Extent{le.Uint32(b[TxDescHeader+TxExtentSize*i:]), le.Uint32(b[TxDescHeader+TxExtentSize*i+4:])})
	}
	d.Extents = ext
	return d, StatusOK
}

// Info is the device's description, OpInfo's answer.
//
//	0  [6]byte MAC
//	6  uint16  flags: 1 TX checksum insertion, 2 RX checksum verdicts
//	8  uint16  MaxFrame
//	10 uint16  MaxTxDescs
//	12 uint16  TxAlign
//	14 uint16  MaxGSOSegments
//	16 uint32  MaxGSOPayload
//	20 uint32  reserved
type Info struct {
	MAC                     [6]byte
	TxCsum, RxCsum          bool
	MaxFrame, MaxTxDescs    uint16
	TxAlign, MaxGSOSegments uint16
	MaxGSOPayload           uint32
}

func (i *Info) encode(b []byte) {
	copy(b, i.MAC[:])
	var f uint16
	if i.TxCsum {
		f |= 1
	}
	if i.RxCsum {
		f |= 2
	}
	le.PutUint16(b[6:], f)
	le.PutUint16(b[8:], i.MaxFrame)
	le.PutUint16(b[10:], i.MaxTxDescs)
	le.PutUint16(b[12:], i.TxAlign)
	le.PutUint16(b[14:], i.MaxGSOSegments)
	le.PutUint32(b[16:], i.MaxGSOPayload)
	le.PutUint32(b[20:], 0)
}

func decodeInfo(b []byte) Info {
	var i Info
	copy(i.MAC[:], b)
	f := le.Uint16(b[6:])
	i.TxCsum, i.RxCsum = f&1 != 0, f&2 != 0
	i.MaxFrame = le.Uint16(b[8:])
	i.MaxTxDescs = le.Uint16(b[10:])
	i.TxAlign = le.Uint16(b[12:])
	i.MaxGSOSegments = le.Uint16(b[14:])
	i.MaxGSOPayload = le.Uint32(b[16:])
	return i
}

var le = binary.LittleEndian

// Region is the transfer region as the Secure World sees it: every access
// goes through Slice, which checks the extent with 64-bit arithmetic.
type Region []byte

// Slice returns the n bytes at off, or StatusBadRange when any of them
// lies outside the region.
func (r Region) Slice(off, n uint32) ([]byte, Status) {
	if uint64(off)+uint64(n) > uint64(len(r)) {
		return nil, StatusBadRange
	}
	return r[off : off+n : off+n], StatusOK
}
