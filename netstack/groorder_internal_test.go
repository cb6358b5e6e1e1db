package netstack

import (
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/internal/pkt"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// groSeg builds an Ethernet/IPv4/TCP frame of port sport with n payload bytes.
func groSeg(sport uint16, seq uint32, flags byte, n int) []byte {
	f := make([]byte, 14+20+20+n)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(40+n))
	copy(ip[12:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12], tcp[13] = 5<<4, flags|0x10
	return f
}

func bypassOf(t *testing.T, o *groOrder, f []byte) bool {
	t.Helper()
	var h pkt.Headers
	if err := h.Parse(f); err != nil {
		t.Fatal(err)
	}
	by := o.bypass(f, &h)
	holes := 0
	for _, fl := range o.flows {
		if fl.hole {
			holes++
		}
	}
	if holes != o.holes {
		t.Fatalf("%d flows with a hole, counted %d", holes, o.holes)
	}
	return by
}

// The flow's state machine: in-order data merges; a gap opens a hole and
// everything after it bypasses GRO, the segments contiguous with each other
// too; the hole closes once a retransmission has come and new data follows
// the highest byte seen. Old data never merges; SYN starts afresh; another
// flow is unaffected; the wrap of sequence space is no gap.
func TestGROOrderHoles(t *testing.T) {
	var o groOrder
	const m = 1000
	base := uint32(0xFFFFF000) // wraps during the test
	steps := []struct {
		seq    uint32
		bypass bool
		what   string
	}{
		{base, false, "first data"},
		{base + m, false, "in order"},
		{base + 2*m, false, "in order"},
		{base + 4*m, true, "gap: one segment lost"},
		{base + 5*m, true, "contiguous after the gap"},
		{base + 6*m, true, "contiguous after the gap"},
		{base + 7*m, true, "new data, no retransmission yet"},
		{base + 3*m, true, "the retransmission"},
		{base + 8*m, true, "new data after it: closes the hole"},
		{base + 9*m, false, "merging again"},
		{base + 2*m, true, "old data"},
		{base + 10*m, false, "in order after old data"},
		{base + 10*m + m/2, true, "old data running past next (repacketized)"},
		{base + 11*m + m/2, false, "in order after it: no false hole"},
	}
	for i, s := range steps {
		if got := bypassOf(t, &o, groSeg(1000, s.seq, 0, m)); got != s.bypass {
			t.Fatalf("step %d (%s): bypass %v", i, s.what, got)
		}
		if i == 5 {
			// Another flow meanwhile merges as usual, and a pure ACK of
			// the holed flow bypasses with it.
			if bypassOf(t, &o, groSeg(2000, 7, 0, m)) || bypassOf(t, &o, groSeg(2000, 7+m, 0, m)) {
				t.Fatal("an unrelated flow bypassed GRO")
			}
			if !bypassOf(t, &o, groSeg(1000, 1, 0, 0)) {
				t.Fatal("a pure ACK of a flow with a hole was not kept out of GRO")
			}
		}
	}
	// A SYN on the 4-tuple starts a new flow: its first data merges.
	bypassOf(t, &o, groSeg(1000, 500, tcpSYN, 0))
	if bypassOf(t, &o, groSeg(1000, 501, 0, m)) {
		t.Fatal("data after a SYN bypassed GRO")
	}
}

// During a hole, old data (a zero-window probe's or a keepalive's byte
// before the hole) is not the retransmission: the hole stays open until
// the lost segment itself comes and new data follows it.
func TestGROOrderProbeIsNoRetransmission(t *testing.T) {
	var o groOrder
	const m = 1000
	steps := []struct {
		seq    uint32
		n      int
		bypass bool
		what   string
	}{
		{0, m, false, "first data"},
		{m, m, false, "in order"},
		{3 * m, m, true, "gap: 2m..3m lost"},
		{2*m - 1, 1, true, "keepalive byte before the hole"},
		{4 * m, m, true, "new data: the hole stays (no retransmission)"},
		{2 * m, m, true, "the retransmission"},
		{5 * m, m, true, "new data after it: closes the hole"},
		{6 * m, m, false, "merging again"},
	}
	for i, s := range steps {
		if got := bypassOf(t, &o, groSeg(7, s.seq, 0, s.n)); got != s.bypass {
			t.Fatalf("step %d (%s): bypass %v", i, s.what, got)
		}
	}
}

// A hole that never closes (the retransmission never seen here) stops
// holding the flow out of GRO after holeSegments segments.
func TestGROOrderHoleGivesUp(t *testing.T) {
	var o groOrder
	bypassOf(t, &o, groSeg(1, 0, 0, 100))
	n := 0
	for seq := uint32(200); bypassOf(t, &o, groSeg(1, seq, 0, 100)); seq += 100 {
		if n++; n > holeSegments+1 {
			t.Fatal("the hole never gave up")
		}
	}
	if n != holeSegments+1 {
		t.Fatalf("gave up after %d segments, want %d", n, holeSegments+1)
	}
}

// More flows than the table holds: the least recently used is forgotten,
// which costs its next segment a fresh start, never a wrong bypass. Pure
// ACKs (a sending flow's) start no flow and evict none.
func TestGROOrderEviction(t *testing.T) {
	var o groOrder
	for p := uint16(1); p <= groFlows+4; p++ {
		if bypassOf(t, &o, groSeg(p, 1000, 0, 100)) {
			t.Fatalf("flow %d's first segment bypassed", p)
		}
	}
	for p := uint16(1); p <= groFlows+4; p++ {
		if bypassOf(t, &o, groSeg(p, 1100, 0, 100)) {
			t.Fatalf("flow %d's in-order segment bypassed", p)
		}
	}
	for p := uint16(100); p < 300; p++ {
		bypassOf(t, &o, groSeg(p, 1, 0, 0))
	}
	// Flow 5, the least recently used of those followed, still is: its
	// gap is seen.
	if !bypassOf(t, &o, groSeg(5, 1400, 0, 100)) {
		t.Fatal("a gap went unseen: pure ACKs evicted the flow")
	}
}

// Any frame that parses, however mangled its TCP header, is judged without
// a panic.
func FuzzGROOrder(f *testing.F) {
	f.Add(groSeg(1, 0, 0, 10), groSeg(1, 20, 0, 10))
	f.Add(groSeg(1, 0, tcpSYN, 0), groSeg(1, 1, 0, 0))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var o groOrder
		for _, fr := range [][]byte{a, b, a} {
			var h pkt.Headers
			if h.Parse(fr) != nil || h.Proto != pkt.ProtoTCP || h.Fragment {
				continue
			}
			o.bypass(fr, &h)
			holes := 0
			for _, fl := range o.flows {
				if fl.hole {
					holes++
				}
			}
			if holes != o.holes {
				t.Fatalf("%d flows with a hole, counted %d", holes, o.holes)
			}
		}
	})
}

// counting dispatcher: counts the packets GRO hands up.
type countDispatcher struct{ n int }

func (d *countDispatcher) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	d.n++
}
func (d *countDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// More flows than GRO has buckets, one segment each: the endpoint's flush
// hands every one up. gVisor's own Flush hands up only the first packet of
// each bucket, leaving the others held until later traffic.
func TestFlushGROHandsUpEveryFlow(t *testing.T) {
	var e Endpoint
	e.gro.Init(true)
	d := &countDispatcher{}
	e.groOut.d = d
	e.gro.Dispatcher = &e.groOut
	const flows = 40
	for p := uint16(1); p <= flows; p++ {
		f := groSeg(p, 1000, 0, 100)
		pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
		pb.LinkHeader().Consume(header.EthernetMinimumSize)
		pb.NetworkProtocolNumber = header.IPv4ProtocolNumber
		pb.RXChecksumValidated = true
		e.gro.Enqueue(pb)
		pb.DecRef()
	}
	if d.n != 0 {
		t.Fatalf("%d segments handed up before any flush", d.n)
	}
	e.gro.Flush()
	once := d.n
	e.flushGRO()
	if d.n != flows {
		t.Fatalf("%d of %d segments handed up after flushGRO", d.n, flows)
	}
	t.Logf("gVisor's Flush alone handed up %d of %d", once, flows)
}

// A segment without data bypasses GRO when GRO may hold data of its flow
// (handed to it since the last flush), and only then: gVisor's GRO would
// merge it into that data, losing its header (window, duplicate ACK).
func TestGROOrderKeepsSegmentsWithoutDataOutOfHeldFlows(t *testing.T) {
	var o groOrder
	if bypassOf(t, &o, groSeg(1, 100, 0, 0)) {
		t.Fatal("a pure ACK with nothing held bypassed GRO")
	}
	if bypassOf(t, &o, groSeg(1, 0, 0, 100)) {
		t.Fatal("in-order data bypassed GRO")
	}
	for _, flags := range []byte{0, 0x01} { // pure ACK, bare FIN
		if !bypassOf(t, &o, groSeg(1, 100, flags, 0)) {
			t.Fatalf("flags %#x: a segment without data entered GRO behind its flow's data", flags)
		}
	}
	var h pkt.Headers
	other := groSeg(2, 100, 0, 0)
	h.Parse(other)
	if heldBit(flowKey(other, &h)) != o.held && bypassOf(t, &o, other) {
		t.Fatal("another flow's pure ACK bypassed GRO")
	}
	o.held = 0 // flushed
	if bypassOf(t, &o, groSeg(1, 100, 0, 0)) {
		t.Fatal("a pure ACK bypassed GRO after the flush")
	}
}
