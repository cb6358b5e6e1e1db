package netstack

import (
	"encoding/binary"
	"errors"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// TX checksum offload (Options-independent: advertised whenever the device
// inserts checksums, DeviceInfo.TxCsum).
//
// With stack.CapabilityTXChecksumOffload gVisor leaves every TCP and UDP
// checksum of a packet it does not hand over as host GSO to the link
// endpoint (and computes only the IPv4 header checksum). gVisor's own sum
// is portable Go: in the sg and bounce modes, where every segment is such a
// packet, it cost 2.4 M guest instructions per MiB sent (PC-exact icount
// profile), a tenth of the transfer. The endpoint then completes them:
//
//   - TCP: the MAC inserts the checksum (Device.Transmit with csum), which
//     costs no CPU at all.
//   - UDP: the endpoint computes it (pkt.Sum, in assembly on ARM), so that
//     a sum of zero goes out as 0xFFFF (RFC 768), which hardware insertion
//     need not do.
//   - UDP (and TCP) datagrams gVisor fragments: the checksum covers the
//     whole datagram, which no NIC can insert fragment by fragment, and
//     gVisor hands the fragments over one at a time. The endpoint holds
//     them until the last one (gVisor writes a datagram's fragments in
//     order, in one loop), computes the checksum over all of them, writes
//     it into the first, and then queues them all.
//   - Everything else (ICMP, ARP, fragments of other protocols) carries
//     gVisor's checksums and goes as is.

// maxHeldDatagrams bounds the fragmented datagrams held at once; a new one
// beyond it drops the oldest (counted in TxFragDrops).
const maxHeldDatagrams = 4

// heldDatagram is a fragmented datagram whose fragments are held until
// its last one arrives.
type heldDatagram struct {
	key   txFragKey
	next  int // the fragment offset expected next
	pkts  []*stack.PacketBuffer
	frags [][][]byte
	hdrs  []pkt.Headers
}

// txFragKey identifies a datagram being fragmented.
type txFragKey struct {
	v6       bool
	src, dst [16]byte
	id       uint32
	proto    int
}

// writeCsum queues a non-GSO packet (views in e.frags, headers parsed
// from the first) and completes its transport checksum as described
// above. It returns an error only about p itself; a held fragment counts as
// queued.
func (e *Endpoint) writeCsum(p *stack.PacketBuffer) error {
	frags := e.frags
	h, err := pkt.Parse(frags[0])
	if err != nil {
		return e.dev.Transmit(frags, false, p) // not IP, or headers gVisor did not write contiguously
	}
	switch {
	case h.Fragment && (h.Proto == pkt.ProtoUDP || h.Proto == pkt.ProtoTCP):
		return e.holdFragment(p, h)
	case h.Fragment || h.CsumOff < 0:
		return e.dev.Transmit(frags, false, p)
	case h.Proto == pkt.ProtoTCP && h.CsumOff+2 <= len(frags[0]):
		return e.dev.Transmit(frags, true, p)
	}
	if !fillCsum(frags, h, h.IPEnd-h.L4) {
		return errors.New("netstack: transport header past the packet")
	}
	e.count(func(s *Stats) { s.TxSoftCsum++ })
	return e.dev.Transmit(frags, false, p)
}

// fillCsum computes the transport checksum of the datagram whose IP header
// is in frags[0] at h.L3 and whose l4len transport bytes start at h.L4 of
// the frame frags make (the first fragment's, for a fragmented datagram:
// then frags may be followed by more; see fillDatagram), and writes it at
// its field. It reports false when the field is not within the frame.
func fillCsum(frags [][]byte, h pkt.Headers, l4len int) bool {
	off := h.L4 + 6
	if h.Proto == pkt.ProtoTCP {
		off = h.L4 + 16
	}
	if !putAt(frags, off, 0) {
		return false
	}
	s := sumRange(pkt.PseudoSum(frags[0][h.L3:], h.IPv6, h.Proto, l4len), frags, h.L4, h.IPEnd)
	c := ^pkt.Fold(s)
	if c == 0 && h.Proto == pkt.ProtoUDP {
		c = 0xFFFF
	}
	return putAt(frags, off, c)
}

// putAt writes v big-endian at offset off of the frame made of frags (the
// two bytes may lie in different views). It reports false when off+2 is
// past the frame.
func putAt(frags [][]byte, off int, v uint16) bool {
	b := [2]byte{byte(v >> 8), byte(v)}
	k := 0
	for _, f := range frags {
		for off < len(f) && k < 2 {
			f[off] = b[k]
			off++
			k++
		}
		if k == 2 {
			return true
		}
		off -= len(f)
	}
	return false
}

// sumRange adds to sum the bytes [from, to) of the frame made of frags,
// keeping the 16-bit phase across views of odd length.
func sumRange(sum uint32, frags [][]byte, from, to int) uint32 {
	odd := false
	for _, f := range frags {
		if to <= 0 {
			break
		}
		lo, hi := max(from, 0), min(to, len(f))
		from, to = from-len(f), to-len(f)
		if lo >= hi {
			continue
		}
		b := f[lo:hi]
		if odd {
			s := uint32(pkt.Fold(pkt.Sum(0, b)))
			sum += s>>8 | (s&0xFF)<<8 // an odd start swaps the bytes' places
		} else {
			sum = pkt.Sum(sum, b)
		}
		if len(b)%2 == 1 {
			odd = !odd
		}
	}
	return sum
}

// fragInfo returns a fragment's datagram key, its offset in the datagram
// and whether more fragments follow.
func fragInfo(f []byte, h pkt.Headers) (k txFragKey, off int, more bool) {
	ip := f[h.L3:]
	k.proto = h.Proto
	if h.IPv6 {
		k.v6 = true
		copy(k.src[:], ip[8:24])
		copy(k.dst[:], ip[24:40])
		fh := f[h.L4-8:]
		fo := binary.BigEndian.Uint16(fh[2:])
		k.id = binary.BigEndian.Uint32(fh[4:])
		return k, int(fo &^ 7), fo&1 != 0
	}
	copy(k.src[:], ip[12:16])
	copy(k.dst[:], ip[16:20])
	k.id = uint32(binary.BigEndian.Uint16(ip[4:]))
	fo := binary.BigEndian.Uint16(ip[6:])
	return k, int(fo&0x1FFF) * 8, fo&0x2000 != 0
}

// holdFragment holds a fragment of a UDP or TCP datagram until the
// datagram's last fragment, then completes the datagram's checksum and
// queues every fragment (see writeCsum).
func (e *Endpoint) holdFragment(p *stack.PacketBuffer, h pkt.Headers) error {
	frags := e.frags
	if h.IPEnd > lenFrags(frags) || h.L4 > h.IPEnd {
		return errors.New("netstack: fragment shorter than its IP length")
	}
	k, off, more := fragInfo(frags[0], h)
	var d *heldDatagram
	for _, x := range e.txHeld {
		if x.key == k {
			d = x
		}
	}
	if d == nil {
		if off != 0 {
			// Not the start of a datagram we hold: its checksum cannot be
			// completed.
			return errors.New("netstack: fragment of a datagram whose first fragment was not seen")
		}
		if len(e.txHeld) == maxHeldDatagrams {
			e.dropHeld(e.txHeld[0])
			e.txHeld = e.txHeld[1:]
		}
		d = &heldDatagram{key: k}
		e.txHeld = append(e.txHeld, d)
	}
	if off != d.next {
		e.forget(d)
		e.dropHeld(d)
		return errors.New("netstack: fragments out of order")
	}
	d.next = off + h.IPEnd - h.L4
	d.pkts = append(d.pkts, p)
	d.frags = append(d.frags, append([][]byte(nil), frags...))
	d.hdrs = append(d.hdrs, h)
	if more {
		return nil // held: queued from gVisor's point of view
	}
	e.forget(d)
	// Complete the checksum over the whole datagram, into the first
	// fragment.
	first, fh := d.frags[0], d.hdrs[0]
	field := fh.L4 + 6
	if k.proto == pkt.ProtoTCP {
		field = fh.L4 + 16
	}
	if !putAt(first, field, 0) {
		e.dropHeld(d)
		return errors.New("netstack: first fragment shorter than the transport header")
	}
	s := pkt.PseudoSum(first[0][fh.L3:], fh.IPv6, k.proto, d.next)
	for i, fr := range d.frags {
		// Every fragment but the last carries a multiple of 8 bytes: the
		// 16-bit phase holds across them.
		s = sumRange(s, fr, d.hdrs[i].L4, d.hdrs[i].IPEnd)
	}
	c := ^pkt.Fold(s)
	if c == 0 && k.proto == pkt.ProtoUDP {
		c = 0xFFFF
	}
	putAt(first, field, c)
	e.count(func(s *Stats) { s.TxSoftCsum++ })
	// Queue them all; p, the last, is reported to the caller.
	last := len(d.pkts) - 1
	for i, q := range d.pkts {
		if err := e.dev.Transmit(d.frags[i], false, q); err != nil {
			// The datagram is lost: give up on the rest.
			for j := i; j < last; j++ {
				e.releaseHeld(d.pkts[j])
			}
			e.count(func(s *Stats) { s.TxFragDrops += uint64(last + 1 - i) })
			return err
		}
	}
	return nil
}

func lenFrags(frags [][]byte) int {
	n := 0
	for _, f := range frags {
		n += len(f)
	}
	return n
}

// forget removes d from the held datagrams.
func (e *Endpoint) forget(d *heldDatagram) {
	for i, x := range e.txHeld {
		if x == d {
			e.txHeld = append(e.txHeld[:i], e.txHeld[i+1:]...)
			return
		}
	}
}

// dropHeld releases the fragments of d, which will never be sent.
func (e *Endpoint) dropHeld(d *heldDatagram) {
	for _, q := range d.pkts {
		e.releaseHeld(q)
	}
	if len(d.pkts) > 0 {
		e.count(func(s *Stats) { s.TxFragDrops += uint64(len(d.pkts)) })
	}
	d.pkts, d.frags, d.hdrs = nil, nil, nil
}

// releaseHeld drops the reference writePacket took on a held fragment.
func (e *Endpoint) releaseHeld(q *stack.PacketBuffer) {
	e.held.Add(-1)
	q.DecRef()
}
