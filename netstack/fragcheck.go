package netstack

import (
	"encoding/binary"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// fragCheck verifies the transport checksum of TCP and UDP datagrams that
// arrive as IP fragments (IPv4 or IPv6), in the mode in which RX checksum
// offload is advertised (GRO).
//
// Two gVisor behaviours make this necessary. Reassembly clones the first
// fragment, and a clone keeps RXChecksumValidated, which the NIC sets from
// the capability bit: the reassembled datagram's TCP or UDP checksum would
// never be checked (the MAC cannot: it sees one fragment at a time). And
// gVisor sends fragments with DF set and IPv4 ID 0, so every fragmented
// datagram of a flow shares one reassembly key: a fragment left behind by a
// broken datagram mixes into the next one.
//
// So the endpoint holds every fragment (already copied into a gVisor
// buffer) until the datagram is covered, finds its transport header in the
// first fragment (behind any extension headers of the fragmentable part,
// for IPv6), verifies a TCP or UDP checksum over all of it (offsets are
// multiples of 8, so per-fragment sums simply add), and then hands all the
// fragments up with no checksum verdict (gVisor checks what it reassembles:
// it may hold leftovers of an earlier datagram, see Endpoint's receive
// path), or drops them all. A datagram whose TCP or UDP header it
// does not find (another protocol such as ICMP, a header chain it does
// not walk or that does not fit the first fragment) is handed up complete
// with no checksum verdict (Endpoint.deliverUnverified), so gVisor checks
// it. gVisor's reassembler only ever sees complete datagrams. Overlapping
// fragments (which gVisor's reassembler refuses too, RFC 8200 4.5) and a
// UDP length that disagrees with the datagram are dropped.
// Holding is bounded: at most fragTrackers datagrams and fragMaxBytes
// bytes, each for at most fragTimeout; what is evicted is dropped and
// counted, never delivered unchecked. Only the receive goroutine uses it.
type fragCheck struct {
	table map[fragKey]*fragState
	order []fragKey // oldest first
	bytes int
	now   func() time.Time
}

const (
	fragTrackers = 64
	fragMaxBytes = 1 << 20
	fragTimeout  = 30 * time.Second
)

// fragKey is the reassembly key: addresses and identification, and for
// IPv4 the protocol (RFC 791).
type fragKey struct {
	v6       bool
	src, dst [16]byte
	id       uint32
}

type fragState struct {
	start time.Time
	rest  uint32   // sum of the fragmentable bytes of all fragments but the first
	first []byte   // the first fragment's fragmentable bytes (a copy)
	spans [][2]int // covered [start, end) of the fragmentable part, merged
	total int      // length of the fragmentable part once the last fragment is seen; -1 before
	next  int      // the first header of the fragmentable part (IPv4: the protocol)
	bad   bool     // overlapping fragments: unverifiable
	held  []*stack.PacketBuffer
	bytes int
}

func (c *fragCheck) init() {
	c.table = make(map[fragKey]*fragState)
	c.now = time.Now
}

// add accounts for fragment f (headers h, built into p) and returns the
// packets now ready to deliver (a complete datagram whose checksum, where
// it could check one, was right) and how many held packets it dropped. It
// takes ownership of p's reference.
func (c *fragCheck) add(f []byte, h pkt.Headers, p *stack.PacketBuffer) (ready []*stack.PacketBuffer, dropped int) {
	var k fragKey
	var off int
	var more bool
	ip := f[h.L3:]
	payload := f[h.L4:h.IPEnd]
	if h.IPv6 {
		k.v6 = true
		copy(k.src[:], ip[8:24])
		copy(k.dst[:], ip[24:40])
		fh := f[h.L4-8 : h.L4] // the fragment header precedes the fragmentable part
		k.id = binary.BigEndian.Uint32(fh[4:])
		fo := binary.BigEndian.Uint16(fh[2:])
		off, more = int(fo&^7), fo&1 != 0
	} else {
		copy(k.src[:], ip[12:16])
		copy(k.dst[:], ip[16:20])
		k.id = uint32(binary.BigEndian.Uint16(ip[4:]))<<8 | uint32(ip[9])
		fo := binary.BigEndian.Uint16(ip[6:])
		off, more = int(fo&0x1FFF)*8, fo&0x2000 != 0
	}
	end := off + len(payload)
	if end == off {
		// A fragment without payload: gVisor drops it before reassembly
		// (ipv4.go HandlePacket, ipv6.go processFragmentExtHdr), so it
		// never completes a datagram here either.
		p.DecRef()
		return nil, 1
	}
	now := c.now()
	dropped += c.expire(now)
	st := c.table[k]
	if st == nil {
		st = &fragState{start: now, total: -1}
		c.table[k] = st
		c.order = append(c.order, k)
	}
	for _, s := range st.spans {
		if off == s[0] && end == s[1] {
			p.DecRef() // an exact duplicate
			return nil, dropped
		}
		if off < s[1] && end > s[0] {
			st.bad = true
		}
	}
	st.spans = append(st.spans, [2]int{off, end})
	mergeSpans(&st.spans)
	if off == 0 {
		st.first = append([]byte(nil), payload...)
		st.next = h.Proto
	} else {
		st.rest = uint32(pkt.Fold(pkt.Sum(st.rest, payload)))
	}
	if !more {
		st.total = end
	}
	st.held = append(st.held, p)
	st.bytes += len(f)
	c.bytes += len(f)
	if st.total < 0 || len(st.spans) != 1 || st.spans[0] != [2]int{0, st.total} {
		// Incomplete: keep holding, within bounds.
		for len(c.order) > fragTrackers || c.bytes > fragMaxBytes {
			dropped += c.drop(c.victim())
		}
		return nil, dropped
	}
	c.remove(k)
	ok, checked := st.verify(k)
	if st.bad || checked && !ok {
		for _, q := range st.held {
			q.DecRef()
		}
		return nil, dropped + len(st.held)
	}
	return st.held, dropped
}

// verify checks the transport checksum of a complete datagram: ok, or
// not; checked is false when it found no TCP or UDP header to check
// (another protocol, or a header chain it does not walk or that does not
// fit the first fragment), and the datagram then goes up with no checksum
// verdict, for gVisor to check.
func (st *fragState) verify(k fragKey) (ok, checked bool) {
	next, t := st.next, 0
	if k.v6 {
		// Extension headers of the fragmentable part, which RFC 8200 (and
		// RFC 7112) want whole in the first fragment with the transport
		// header. gVisor walks the reassembled datagram's fragmentable
		// part with the same iterator as any packet (a hop-by-hop header
		// first in it included), and so does this walk (pkt.Parse's set).
	chain:
		for {
			switch next {
			case 0, 43, 60, 253:
				if t+8 > len(st.first) {
					return false, false
				}
				next, t = int(st.first[t]), t+pkt.ExtHeaderLen(next, st.first[t+1])
			default:
				break chain // a fragment header inside a fragment: unchecked
			}
		}
	}
	var need int
	switch next {
	case pkt.ProtoTCP:
		need = 20
	case pkt.ProtoUDP:
		need = 8
	default:
		return false, false
	}
	if t+need > len(st.first) {
		return false, false
	}
	l4len := st.total - t
	seg := st.first[t:]
	if next == pkt.ProtoUDP {
		if int(binary.BigEndian.Uint16(seg[4:])) != l4len {
			return false, true
		}
		if !k.v6 && binary.BigEndian.Uint16(seg[6:]) == 0 {
			return true, true // IPv4 UDP sent without a checksum
		}
	}
	n := 4
	if k.v6 {
		n = 16
	}
	pseudo := uint32(pkt.Fold(pkt.Sum(pkt.Sum(0, k.src[:n]), k.dst[:n]) + uint32(next) + uint32(l4len)))
	// t is a multiple of 8 and every later fragment starts at one, so the
	// sums line up on 16-bit words.
	return pkt.Fold(pkt.Sum(pseudo, seg)+st.rest) == 0xFFFF, true
}

// expire drops datagrams held longer than fragTimeout.
func (c *fragCheck) expire(now time.Time) int {
	n := 0
	for len(c.order) > 0 && now.Sub(c.table[c.order[0]].start) > fragTimeout {
		n += c.drop(c.order[0])
	}
	return n
}

// drop forgets datagram k and releases what it held.
func (c *fragCheck) drop(k fragKey) int {
	st := c.table[k]
	c.remove(k)
	for _, q := range st.held {
		q.DecRef()
	}
	return len(st.held)
}

// victim picks the datagram to drop when the table is full: the oldest of
// the source holding the most bytes, so that one peer flooding first
// fragments evicts its own datagrams and not another peer's (review-checklist
// class 2). It runs only when the table is full (at most fragTrackers+1
// entries).
func (c *fragCheck) victim() fragKey {
	var srcs [fragTrackers + 1]struct {
		src   [16]byte
		bytes int
	}
	n, most := 0, -1
	for _, k := range c.order {
		i := 0
		for i < n && srcs[i].src != k.src {
			i++
		}
		if i == n && n < len(srcs) {
			srcs[n].src, n = k.src, n+1
		}
		if i < n {
			srcs[i].bytes += c.table[k].bytes
			if most < 0 || srcs[i].bytes > srcs[most].bytes {
				most = i
			}
		}
	}
	for _, k := range c.order {
		if most >= 0 && k.src == srcs[most].src {
			return k
		}
	}
	return c.order[0]
}

func (c *fragCheck) remove(k fragKey) {
	if st := c.table[k]; st != nil {
		c.bytes -= st.bytes
	}
	delete(c.table, k)
	for i, o := range c.order {
		if o == k {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}

// release drops everything held (on detach).
func (c *fragCheck) release() {
	for len(c.order) > 0 {
		c.drop(c.order[0])
	}
}

func mergeSpans(s *[][2]int) {
	v := *s
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j][0] < v[j-1][0]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	out := v[:1]
	for _, x := range v[1:] {
		last := &out[len(out)-1]
		if x[0] <= last[1] {
			last[1] = max(last[1], x[1])
		} else {
			out = append(out, x)
		}
	}
	*s = out
}
