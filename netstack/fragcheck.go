package netstack

import (
	"encoding/binary"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// fragCheck verifies the UDP checksum of datagrams that arrive as IP
// fragments, in the mode in which RX checksum offload is advertised (GRO).
//
// Two gVisor behaviours make this necessary. Reassembly clones the first
// fragment, and a clone keeps RXChecksumValidated, which the NIC sets from
// the capability bit: the reassembled datagram's UDP checksum would never be
// checked (the MAC cannot: it sees one fragment at a time). And gVisor sends
// fragments with DF set and IPv4 ID 0, so every fragmented datagram of a
// flow shares one reassembly key: a fragment left behind by a broken
// datagram mixes into the next one.
//
// So the endpoint holds a UDP datagram's fragments (already copied into
// gVisor buffers) until they cover it, verifies its checksum over them
// (offsets are multiples of 8, so per-fragment sums simply add), and then
// hands them all up, or drops them all. gVisor's reassembler only ever sees
// complete, verified datagrams. Holding is bounded: at most fragTrackers
// datagrams and fragMaxBytes bytes, each for at most fragTimeout; what is
// evicted is dropped and counted, never delivered unchecked. Only the
// receive goroutine uses it.
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

type fragKey struct {
	v6       bool
	src, dst [16]byte
	id       uint32
}

type fragState struct {
	start   time.Time
	sum     uint32
	spans   [][2]int // covered [start, end) of the fragmentable part, merged
	total   int      // datagram length (UDP header + data) once the last fragment is seen; -1 before
	udpLen  int
	ckField uint16
	haveHdr bool
	bad     bool // overlapping fragments: unverifiable
	pseudo  uint32
	held    []*stack.PacketBuffer
	bytes   int
}

func (c *fragCheck) init() {
	c.table = make(map[fragKey]*fragState)
	c.now = time.Now
}

// add accounts for fragment f (headers h, built into p) and returns the
// packets now ready to deliver (p alone for fragments it does not hold) and
// how many held packets it dropped. It takes ownership of p's reference.
func (c *fragCheck) add(f []byte, h pkt.Headers, p *stack.PacketBuffer) (ready []*stack.PacketBuffer, dropped int) {
	if h.Proto != pkt.ProtoUDP {
		return []*stack.PacketBuffer{p}, 0
	}
	var k fragKey
	var off int
	var more bool
	ip := f[h.L3:]
	payload := f[h.L4:h.IPEnd]
	if h.IPv6 {
		k.v6 = true
		copy(k.src[:], ip[8:24])
		copy(k.dst[:], ip[24:40])
		fh := f[h.L4-8 : h.L4] // the fragment header precedes the payload
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
	st.sum = uint32(pkt.Fold(pkt.Sum(st.sum, payload)))
	if off == 0 && len(payload) >= 8 {
		st.haveHdr = true
		st.udpLen = int(binary.BigEndian.Uint16(payload[4:]))
		st.ckField = binary.BigEndian.Uint16(payload[6:])
		st.pseudo = pkt.PseudoSum(ip, h.IPv6, pkt.ProtoUDP, st.udpLen)
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
			dropped += c.drop(c.order[0])
		}
		return nil, dropped
	}
	c.remove(k)
	ok := !st.bad && st.haveHdr && st.udpLen == st.total &&
		(st.ckField == 0 && !h.IPv6 || pkt.Fold(st.sum+st.pseudo) == 0xFFFF)
	if !ok {
		for _, q := range st.held {
			q.DecRef()
		}
		return nil, dropped + len(st.held)
	}
	return st.held, dropped
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
