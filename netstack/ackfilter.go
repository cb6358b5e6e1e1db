package netstack

import (
	"encoding/binary"

	"github.com/tamanic/tamanic/internal/pkt"
)

// ACK filtering (RFC 3449, 5.2.1): of the pure TCP acknowledgements of one
// connection that arrive in one receive batch, only the newest is handed
// to the stack; the older ones carry nothing it does not also say.
//
// Why: gVisor's TCP sender sends from inside its handling of each ACK, as
// much as that ACK freed. A peer that acknowledges every segment or two
// (QEMU's slirp, most stacks with delayed ACK) thus gets one or two segments
// per GSO packet, however large the window, and TSO saves almost nothing.
// Handed only the newest of k queued ACKs, the sender sends everything they
// freed at once, as one GSO packet.
//
// An ACK is dropped only when a later pure ACK of the same connection in
// the batch acknowledges strictly more and has passed its checksums; never
// in favour of one with the same acknowledgement number. So duplicate ACKs
// of the highest acknowledgement in the batch, the ones that can still
// report a missing segment, always reach the stack. Duplicate ACKs of a
// lower number are dropped with the ACK they repeat: the later ACK shows
// that the segment they report missing has arrived. Handed to the stack,
// they could only start a spurious fast retransmit of it, or inflate the
// congestion window during recovery (RFC 5681, 3.2) for segments that the
// later ACK acknowledges anyway; without them the sender never sends more
// than it would have, only the same data on the later ACK. Linux's CAKE
// ACK filter uses the same eligibility rule: only an ACK that acknowledges
// fewer cumulative bytes than a newer one of its flow may go.
//
// What is never dropped besides: ACKs with SACK or any option but
// timestamps and padding, ACKs with any flag but ACK (SYN, FIN, RST, URG,
// ECE, CWR, PSH), ACKs carrying data, ACKs marked Congestion Experienced,
// fragments, IPv4 options, IPv6 extension headers, VLAN-tagged frames.

// ackKey identifies a TCP connection in one direction: the addresses as
// 32-bit words (IPv4 in the first of each four), the ports in one word.
// All fields are words so that comparing keys compares ten words (with
// byte arrays, Go's comparison is memeqbody, a byte loop on ARM).
type ackKey struct {
	src, dst [4]uint32
	ports    uint32
	v6       uint32
}

// same reports a == b word by word, ports first (they differ first between
// connections): == on the 40-byte key is a runtime.memequal call on
// GOARM=7, made for almost every ACK of a batch. It is small enough to be
// inlined: an IPv4 key's other address words are zero (classifyACKTo), so
// only IPv6 keys need sameV6Rest.
func (a *ackKey) same(b *ackKey) bool {
	return a.ports == b.ports && a.src[0] == b.src[0] && a.dst[0] == b.dst[0] && a.v6 == b.v6 &&
		(a.v6 == 0 || a.sameV6Rest(b))
}

// sameV6Rest compares the address words same leaves to it.
func (a *ackKey) sameV6Rest(b *ackKey) bool {
	return a.src[1] == b.src[1] && a.src[2] == b.src[2] && a.src[3] == b.src[3] &&
		a.dst[1] == b.dst[1] && a.dst[2] == b.dst[2] && a.dst[3] == b.dst[3]
}

// pureACK is what filtering needs of a frame.
type pureACK struct {
	ok  bool // a pure ACK that may be dropped or may replace others
	key ackKey
	ack uint32
}

// classifyACK reports whether f is a filterable pure ACK. It parses only
// what a pure ACK can be: untagged Ethernet, IPv4 without options or IPv6
// without extension headers, TCP with at most 40 bytes of options; anything
// else (larger frames included) is kept as is.
func classifyACK(f []byte) pureACK {
	var p pureACK
	classifyACKTo(f, &p)
	return p
}

// classifyACKTo is classifyACK writing its verdict to *p (ok false: keep
// the frame as is), in place: the key is 40 bytes, and returning it by
// value cost a copy per frame on the receive path.
func classifyACKTo(f []byte, p *pureACK) {
	p.ok = false
	const eth = 14
	if len(f) < eth+20+20 || len(f) > maxACKFrame {
		return
	}
	k := &p.key
	var t []byte
	ip := f[eth:]
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		// Version 4, IHL 5, TCP, not Congestion Experienced, not a fragment.
		if ip[0] != 0x45 || ip[9] != pkt.ProtoTCP || ip[1]&3 == 3 || ip[6]&0x3F != 0 || ip[7] != 0 {
			return
		}
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot < 40 || tot > len(ip) {
			return
		}
		// Word by word: assigning a whole ackKey zeroes it first with a
		// runtime.duffzero call on GOARM=7.
		k.src[0], k.src[1], k.src[2], k.src[3] = binary.BigEndian.Uint32(ip[12:]), 0, 0, 0
		k.dst[0], k.dst[1], k.dst[2], k.dst[3] = binary.BigEndian.Uint32(ip[16:]), 0, 0, 0
		k.ports, k.v6 = 0, 0
		t = ip[20:tot]
	case 0x86DD:
		// Version 6, next header TCP, not Congestion Experienced.
		if len(ip) < 60 || ip[0]>>4 != 6 || ip[6] != pkt.ProtoTCP || (ip[1]>>4)&3 == 3 {
			return
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl < 20 || 40+pl > len(ip) {
			return
		}
		k.v6 = 1
		for w := 0; w < 4; w++ {
			k.src[w] = binary.BigEndian.Uint32(ip[8+4*w:])
			k.dst[w] = binary.BigEndian.Uint32(ip[24+4*w:])
		}
		t = ip[40 : 40+pl]
	default:
		return
	}
	doff := int(t[12]>>4) * 4
	if doff < 20 || doff != len(t) || t[12]&0x0F != 0 || t[13] != 0x10 {
		// Payload, reserved bits (AccECN), or a flag other than ACK.
		return
	}
	for o := t[20:doff]; len(o) > 0; {
		switch o[0] {
		case 0: // end of options
			o = nil
		case 1: // no-operation
			o = o[1:]
		case 8: // timestamps
			if len(o) < 10 || o[1] != 10 {
				return
			}
			o = o[10:]
		default: // SACK and anything unknown: keep
			return
		}
	}
	k.ports = binary.BigEndian.Uint32(t[0:])
	p.ack = binary.BigEndian.Uint32(t[8:])
	p.ok = true
}

// maxACKFrame is the longest frame classifyACK accepts: Ethernet, IPv6
// and TCP with 40 bytes of options.
const maxACKFrame = 14 + 40 + 60

// seqAfter reports whether a is after b in sequence space (RFC 1982).
func seqAfter(a, b uint32) bool { return int32(a-b) > 0 }

// ackSlot is the filter's view of one frame of a batch.
type ackSlot struct {
	pureACK
	drop  bool
	trust int8 // 0: not asked yet, 1: checksums good, -1: bad
}

// filterACKs sets drop on the frames of batch (described in slots, one
// per frame) whose pure ACK is superseded by a later one of the same
// connection in the batch. trusted reports whether a frame's checksums are
// good; it is asked at most once per frame, and only about frames that
// would supersede another (pure ACKs classifyACK accepted). It returns how
// many frames it marked.
//
// It walks the batch backwards keeping, per connection, the later ACK with
// the highest acknowledgement number seen so far (a handful of
// connections: maxBest), so each frame costs one look-up instead of a
// comparison with every later frame (a 45-ACK batch of one connection made
// about a thousand key comparisons). Where that ACK failed its checksums,
// or more connections share the batch than maxBest, the frame is compared
// with every later one, as the definition says.
func filterACKs(batch []Frame, slots []ackSlot, trusted func(Frame) bool) int {
	slots = slots[:len(batch)]
	for i, f := range batch {
		slots[i].classify(f.Bytes())
	}
	return filterSlots(slots, func(j int) bool { return trusted(batch[j]) })
}

// classify resets the slot for frame f.
func (s *ackSlot) classify(f []byte) {
	s.drop, s.trust = false, 0
	classifyACKTo(f, &s.pureACK)
}

// filterSlots is filterACKs on frames already classified into slots;
// trusted is asked by slot index.
func filterSlots(slots []ackSlot, trusted func(int) bool) int {
	trust := func(j int) bool {
		sj := &slots[j]
		if sj.trust == 0 {
			sj.trust = -1
			if trusted(j) {
				sj.trust = 1
			}
		}
		return sj.trust > 0
	}
	var best [maxBest]int // per connection, the index of its highest later ACK
	nb := 0
	n := 0
	for i := len(slots) - 1; i >= 0; i-- {
		si := &slots[i]
		if !si.ok {
			continue
		}
		k := 0
		for k < nb && !slots[best[k]].key.same(&si.key) {
			k++
		}
		switch {
		case k == nb && nb < maxBest:
			best[nb] = i
			nb++
			continue
		case k == nb:
			// Too many connections to track: the full comparison.
		case !seqAfter(slots[best[k]].ack, si.ack):
			// No later ACK of this connection acknowledges more.
			best[k] = i
			continue
		case trust(best[k]):
			si.drop = true
			n++
			continue
		}
		// The full comparison with every later frame.
		for j := len(slots) - 1; j > i; j-- {
			sj := &slots[j]
			if sj.ok && sj.key.same(&si.key) && seqAfter(sj.ack, si.ack) && trust(j) {
				si.drop = true
				n++
				break
			}
		}
	}
	return n
}

// maxBest is how many connections filterACKs follows in one batch with a
// single look-up per frame.
const maxBest = 8
