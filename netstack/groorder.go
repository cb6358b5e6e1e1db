package netstack

import (
	"encoding/binary"
	"math/bits"

	"github.com/tamanic/tamanic/internal/pkt"
)

// groOrder keeps GRO from merging a TCP flow's segments while the flow has
// a hole, so that the receiver sees each segment after the hole and sends a
// duplicate ACK for each. Merged, the segments behind a lost one reach
// gVisor's TCP as one out-of-order segment and draw one duplicate ACK; the
// sender, which without SACK (the firmware and the test stacks run with it
// off) retransmits on the third, then waits for its retransmission timeout
// instead. In the stall campaign (go test ./netstack -run TestCampaign
// -campaign 6) every lossy configuration with GRO took 5-7 s per 4 MiB
// where the same without GRO took 0.3-1.6 s.
//
// The receive goroutine owns it. It follows the last flows it saw, by the
// hash of their addresses and ports: a segment that starts past the next
// expected byte opens a hole; until its retransmission (data inside the
// hole) has come and new data continues from the highest byte seen, or holeSegments segments have passed, the flow's segments
// bypass GRO. A collision or an evicted flow costs merging, never data.
// With several losses in one window the hole closes after the first
// retransmission; NewReno resends the next lost segment on the partial ACK
// that follows, without waiting for duplicate ACKs.
//
// It also keeps segments without data (pure and duplicate ACKs, window
// updates, a bare FIN) out of GRO behind a data segment of their flow.
// gVisor's GRO merges such a segment into the held segment before it when
// its sequence number follows on and its acknowledgement, flags (but FIN,
// PSH, CWR) and options match (stack/gro found and shouldFlushTCP: the
// merge happens first, the flush for a segment without data after it), and
// the merged packet keeps the held segment's header: the window a window
// update announced, and a duplicate ACK, never reached TCP (the peer's
// window update lost, no data sent for 1 s; three duplicate ACKs counted
// as two, no fast retransmit). Such a segment of a flow GRO may hold data
// of is delivered past GRO, after a flush (as a segment behind a hole);
// so is an in-order data segment that changes the flow's window (gVisor's
// GRO merges data whatever the windows and keeps the first).
type groOrder struct {
	flows [groFlows]groFlow
	clock uint32
	last  int // the slot of the last lookup, tried first
	holes int // flows with a hole: none, and a pure ACK needs no lookup
	// held has bit heldBit(key) set for each flow with a data segment
	// handed to GRO since the last flush (Endpoint.flushGRO clears it): a
	// pure ACK looks itself up only when it is not zero, and a collision
	// costs a flush, never a header.
	held uint32
}

// heldBit is flow key's bit in groOrder.held: the top bits of the
// multiplicative hash, its best mixed.
func heldBit(key uint32) uint32 { return 1 << (key >> 27) }

const (
	groFlows     = 16
	holeSegments = 1024
)

// Its words are 32 bits: the receive path runs on 32-bit ARM, where each
// 64-bit operation takes two or more instructions.
type groFlow struct {
	key        uint32
	used       uint32 // groOrder.clock at the last segment; 0: free
	next       uint32 // the byte after the last in-order segment
	high       uint32 // the byte after the highest segment while in a hole
	win        uint32 // the window field of the last in-order segment
	hole, retx bool
	bypassed   int
}

// seqLT reports whether a is before b in sequence space (RFC 793 modular
// comparison).
func seqLT(a, b uint32) bool { return int32(a-b) < 0 }

// bypass reports whether the TCP segment b (an Ethernet frame whose
// headers h describes) must skip GRO, and updates its flow.
func (o *groOrder) bypass(b []byte, h *pkt.Headers) bool {
	if h.L4+20 > len(b) || h.IPEnd > len(b) {
		return false
	}
	tcp := b[h.L4:]
	flags := tcp[13]
	doff := int(tcp[12]>>4) * 4
	if doff < 20 || h.L4+doff > h.IPEnd {
		return false
	}
	n := uint32(h.IPEnd - h.L4 - doff)
	if n == 0 && flags&(tcpSYN|tcpRST) == 0 {
		// A segment without data (a pure or duplicate ACK, a window
		// update, a bare FIN) starts no flow: a sender's incoming ACKs
		// must not evict receiving flows. It goes to GRO only when GRO
		// holds no data of its flow (then GRO hands it straight up: it
		// flushes a segment without data), and not into a flow with a
		// hole, where it keeps its place behind the flow's data.
		if o.held == 0 && o.holes == 0 {
			return false // nothing to merge it into, no hole to keep
		}
		key := flowKey(b, h)
		if o.held&heldBit(key) != 0 {
			return true
		}
		if o.holes == 0 {
			return false
		}
		f := o.find(key)
		return f != nil && f.hole
	}
	key := flowKey(b, h)
	if flags&(tcpSYN|tcpRST) != 0 {
		// A SYN or RST forgets the flow: a new connection starts afresh.
		// GRO flushes the flow's held data before it (its flags differ).
		if f := o.find(key); f != nil {
			o.forget(f)
		}
		return false
	}
	f := &o.flows[o.last] // most segments are the last flow's
	if f.used == 0 || f.key != key {
		f = o.lookup(key)
	}
	seq := binary.BigEndian.Uint32(tcp[4:])
	end := seq + n
	if o.clock++; o.clock == 0 {
		o.clock = 1 // 0 marks a free slot
	}
	win := uint32(binary.BigEndian.Uint16(tcp[14:]))
	if f.used == 0 {
		*f = groFlow{key: key, next: end, used: o.clock, win: win}
		o.held |= heldBit(key)
		return false
	}
	f.used = o.clock
	if !f.hole {
		switch {
		case seq == f.next:
			f.next = end
			if win != f.win {
				// A window update on data: gVisor's GRO would merge it
				// into the held segment and keep that one's window (it
				// does not compare windows; Linux's GRO flushes). It
				// goes up on its own, after a flush, if data may be held.
				f.win = win
				if o.held&heldBit(key) != 0 {
					return true
				}
			}
			o.held |= heldBit(key)
			return false
		case seqLT(seq, f.next):
			// Old data again (a retransmission the receiver already had,
			// perhaps repacketized to run past next): nothing to merge.
			if seqLT(f.next, end) {
				f.next = end
			}
			return true
		}
		f.hole, f.retx, f.high, f.bypassed = true, false, end, 1
		o.holes++
		return true
	}
	f.bypassed++
	switch {
	case seqLT(seq, f.high) && !seqLT(seq, f.next):
		// Data inside the hole (next is where it starts): the
		// retransmission. Older data, a zero-window probe's or a
		// keepalive's byte, does not count.
		f.retx = true
	case seqLT(seq, f.high):
		// Older than the hole: changes nothing.
	case f.retx && seq == f.high:
		// New data after a retransmission: the next segments merge.
		f.hole, f.next, f.win = false, end, win
		o.holes--
		return true
	}
	if seqLT(f.high, end) {
		f.high = end
	}
	if f.bypassed > holeSegments {
		f.hole, f.next = false, f.high
		o.holes--
	}
	return true
}

// find returns key's flow, or nil.
func (o *groOrder) find(key uint32) *groFlow {
	for i := range o.flows {
		if f := &o.flows[i]; f.used != 0 && f.key == key {
			return f
		}
	}
	return nil
}

// lookup returns key's flow, or the least recently used slot, cleared
// (used 0: the caller starts the flow).
func (o *groOrder) lookup(key uint32) *groFlow {
	if f := &o.flows[o.last]; f.used != 0 && f.key == key {
		return f
	}
	lru := 0
	for i := range o.flows {
		f := &o.flows[i]
		if f.used != 0 && f.key == key {
			o.last = i
			return f
		}
		if f.used < o.flows[lru].used {
			lru = i
		}
	}
	o.last = lru
	o.forget(&o.flows[lru])
	return &o.flows[lru]
}

// forget clears flow f's slot.
func (o *groOrder) forget(f *groFlow) {
	if f.hole {
		o.holes--
	}
	*f = groFlow{}
}

// TCP flags (RFC 793 3.1).
const (
	tcpSYN = 0x02
	tcpRST = 0x04
)

// flowKey folds the segment's addresses and ports into 32 bits (a
// collision costs merging, never data). The IPv4 case is small enough to
// be inlined: it runs for every TCP segment received.
func flowKey(b []byte, h *pkt.Headers) uint32 {
	if h.IPv6 {
		return flowKey6(b, h.L3, h.L4)
	}
	le := binary.LittleEndian
	return (le.Uint32(b[h.L4:]) ^ le.Uint32(b[h.L3+12:]) ^ bits.RotateLeft32(le.Uint32(b[h.L3+16:]), 16)) * 0x9E3779B1
}

func flowKey6(b []byte, l3, l4 int) uint32 {
	le := binary.LittleEndian
	k := le.Uint32(b[l4:]) // ports
	for i := l3 + 8; i < l3+40; i += 4 {
		k = bits.RotateLeft32(k, 5) ^ le.Uint32(b[i:])
	}
	return k * 0x9E3779B1
}
