package fec

import (
	"fmt"
	"strings"
	"unsafe"
)

// Buffer descriptors (p1012, 22.6.13 "Legacy buffer descriptors" and 22.6.14
// "Enhanced buffer descriptors", Tables 22-35..22-37, IMX6ULLRM). With
// ECR.DBSWP set the uDMA reads them little-endian: halfword 0 is the data
// length, halfword 1 the status, word 1 the buffer address. Enhanced
// descriptors add six words. Software and the uDMA exchange descriptors
// through single 32-bit accesses, so every field is read and written here as
// part of its aligned 32-bit word.
const (
	LegacyDescSize   = 8
	EnhancedDescSize = 32
)

// Word offsets within a descriptor.
const (
	dwLenStatus = 0  // [15:0] length, [31:16] status
	dwAddr      = 4  // buffer address
	dwExt0      = 8  // TX: [15:0] error status, [31:16] control; RX: [15:0] status, [31:16] control
	dwExt1      = 12 // RX: [15:0] payload checksum, [23:16] protocol type, [31:27] IP+L4 header length in 32-bit words
	dwExt2      = 16 // bit 31 BDU
)

// TxStatus is the status halfword of a TX descriptor.
type TxStatus uint16

// TX status bits (Table 22-36).
const (
	TX_R   TxStatus = 1 << 15 // ready: owned by the uDMA
	TX_TO1 TxStatus = 1 << 14 // software use
	TX_W   TxStatus = 1 << 13 // wrap: the next descriptor is at TDSR
	TX_TO2 TxStatus = 1 << 12 // software use
	TX_L   TxStatus = 1 << 11 // last buffer of the frame
	TX_TC  TxStatus = 1 << 10 // append CRC
	TX_ABC TxStatus = 1 << 9  // append bad CRC
)

var txNames = []struct {
	b TxStatus
	n string
}{{TX_R, "R"}, {TX_TO1, "TO1"}, {TX_W, "W"}, {TX_TO2, "TO2"}, {TX_L, "L"}, {TX_TC, "TC"}, {TX_ABC, "ABC"}}

func (s TxStatus) String() string {
	var f []string
	for _, x := range txNames {
		if s&x.b != 0 {
			f = append(f, x.n)
		}
	}
	return "[" + strings.Join(f, " ") + "]"
}

// Enhanced TX extended word (dwExt0): control in the high half, error status
// in the low half (Table 22-37).
const (
	TXE_INT  = 1 << 30 // raise TXB/TXF for this descriptor
	TXE_TS   = 1 << 29
	TXE_PINS = 1 << 28 // insert the TCP/UDP checksum
	TXE_IINS = 1 << 27 // insert the IPv4 header checksum
	TXE_TXE  = 1 << 15 // transmit error occurred
	TXE_UE   = 1 << 13 // underflow
	TXE_EE   = 1 << 12 // excess collisions
	TXE_FE   = 1 << 11 // frame error
	TXE_LCE  = 1 << 10 // late collision
	TXE_OE   = 1 << 9  // overflow
	TXE_TSE  = 1 << 8  // timestamp error
	BDU      = 1 << 31 // in dwExt2: the uDMA has updated the descriptor
)

// RxStatus is the status halfword of an RX descriptor.
type RxStatus uint16

// RX status bits (Table 22-35). Error bits are valid only with L.
const (
	RX_E   RxStatus = 1 << 15 // empty: owned by the uDMA
	RX_RO1 RxStatus = 1 << 14
	RX_W   RxStatus = 1 << 13
	RX_RO2 RxStatus = 1 << 12
	RX_L   RxStatus = 1 << 11 // last buffer of the frame
	RX_M   RxStatus = 1 << 8  // miss: accepted only because of PROM
	RX_BC  RxStatus = 1 << 7
	RX_MC  RxStatus = 1 << 6
	RX_LG  RxStatus = 1 << 5 // longer than MAX_FL
	RX_NO  RxStatus = 1 << 4 // non-octet-aligned frame
	RX_CR  RxStatus = 1 << 2 // CRC error
	RX_OV  RxStatus = 1 << 1 // FIFO overrun
	RX_TR  RxStatus = 1 << 0 // truncated (longer than FTRL)
)

var rxNames = []struct {
	b RxStatus
	n string
}{{RX_E, "E"}, {RX_RO1, "RO1"}, {RX_W, "W"}, {RX_RO2, "RO2"}, {RX_L, "L"}, {RX_M, "M"}, {RX_BC, "BC"},
	{RX_MC, "MC"}, {RX_LG, "LG"}, {RX_NO, "NO"}, {RX_CR, "CR"}, {RX_OV, "OV"}, {RX_TR, "TR"}}

func (s RxStatus) String() string {
	var f []string
	for _, x := range rxNames {
		if s&x.b != 0 {
			f = append(f, x.n)
		}
	}
	return "[" + strings.Join(f, " ") + "]"
}

// Enhanced RX extended word (dwExt0): status low, control high.
const (
	RXE_ME  = 1 << 31 // MAC error
	RXE_PE  = 1 << 26 // PHY error
	RXE_CE  = 1 << 25 // collision
	RXE_UC  = 1 << 24 // unicast
	RXE_INT = 1 << 23 // raise RXB/RXF for this descriptor
	// ICE: IP header checksum error, also set for a frame that is not IP
	// and for an IP datagram with under 3 bytes of payload. PCR: protocol
	// checksum error, also set when the protocol is one the accelerator
	// cannot check. Both mean "not verified", never "corrupt".
	RXE_ICE  = 1 << 5
	RXE_PCR  = 1 << 4
	RXE_VLAN = 1 << 2
	RXE_IPV6 = 1 << 1
	RXE_FRAG = 1 << 0 // IPv4 fragment

	rxeErrMask = RXE_ME | RXE_PE | RXE_CE
)

// Enhanced RX word dwExt1 fields (Table 22-35, IMX6ULLRM; the manual lists
// them big-endian at +0x0C/+0x0E, DBSWP puts them in this word).
const (
	RXE1_PROTO_SHIFT = 16     // protocol type, 8 bits (the IP protocol number)
	RXE1_HLEN_SHIFT  = 27     // IP+L4 header length in 32-bit words, 5 bits; 0: not IP
	RXE1_CSUM_MASK   = 0xFFFF // payload checksum
)

// ring is a descriptor ring in coherent memory.
type ring struct {
	mem  []byte
	size int // bytes per descriptor
	n    int // descriptors
}

func (r *ring) word(i, w int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[i*r.size+w]))
}

// at returns descriptor i's first byte, for callers that touch several of
// its words: one bounds check instead of one per word.
func (r *ring) at(i int) unsafe.Pointer { return unsafe.Pointer(&r.mem[i*r.size]) }

// descWord returns word w (a byte offset within the descriptor, dw*) of the
// descriptor at d.
func descWord(d unsafe.Pointer, w int) *uint32 { return (*uint32)(unsafe.Add(d, w)) }

// load reads word w of descriptor i with one 32-bit access (loadWord);
// callers order the reads that depend on an ownership bit with rmb.
func (r *ring) load(i, w int) uint32 { return loadWord(r.word(i, w)) }

// store writes word w of descriptor i with one 32-bit access (storeWord);
// callers order descriptor stores with Memory.Barrier before handing a
// descriptor to the uDMA.
func (r *ring) store(i, w int, v uint32) { storeWord(r.word(i, w), v) }

// add returns descriptor i+k (0 <= k <= n) modulo the ring size, without
// a division (runtime.udiv on GOARM=7).
func (r *ring) add(i, k int) int {
	if i += k; i >= r.n {
		i -= r.n
	}
	return i
}

func lenStatus(length int, status uint16) uint32 { return uint32(length)&0xFFFF | uint32(status)<<16 }

// DumpTx describes TX descriptors, for failure messages.
func (r *ring) dumpTx(cur, dirty int) string {
	var b strings.Builder
	for i := 0; i < r.n; i++ {
		ls := r.load(i, dwLenStatus)
		mark := "  "
		if i == cur {
			mark = "c>"
		}
		if i == dirty {
			mark = "d>"
		}
		fmt.Fprintf(&b, "%s%3d len=%4d %v addr=%#x\n", mark, i, ls&0xFFFF, TxStatus(ls>>16), r.load(i, dwAddr))
	}
	return b.String()
}
