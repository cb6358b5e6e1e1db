package netstack

import (
	"errors"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// flushGRO hands up everything GRO holds. gVisor's GRO.Flush hands up
// only the first packet of each bucket: it steps to the next packet after
// removing the current one, whose list links the removal has cleared (gro.go
// Flush; google/gvisor PR 14081, open, fixes it upstream), so a flow
// sharing a bucket with another stayed held until later traffic. Flush is
// called again until a call hands up nothing (groOut counts what GRO hands
// up): two calls when every flow had its own bucket.
func (e *Endpoint) flushGRO() {
	e.order.held = 0
	for {
		n := e.groOut.n
		e.gro.Flush()
		if e.groOut.n == n {
			return
		}
	}
}

// groOut passes what GRO hands up to the dispatcher, counting it.
type groOut struct {
	d stack.NetworkDispatcher
	n int
}

// DeliverNetworkPacket implements stack.NetworkDispatcher.
func (g *groOut) DeliverNetworkPacket(p tcpip.NetworkProtocolNumber, pb *stack.PacketBuffer) {
	g.n++
	g.d.DeliverNetworkPacket(p, pb)
}

// DeliverLinkPacket implements stack.NetworkDispatcher.
func (g *groOut) DeliverLinkPacket(p tcpip.NetworkProtocolNumber, pb *stack.PacketBuffer) {
	g.d.DeliverLinkPacket(p, pb)
}

func (e *Endpoint) rxLoop(d stack.NetworkDispatcher, stop, prev, exited chan struct{}) {
	defer e.wg.Done()
	defer close(exited)
	if prev != nil {
		<-prev // the previous goroutine is done with gro, frag and the device
	}
	e.groOut.d = d
	e.gro.Dispatcher = &e.groOut
	defer e.frag.release()
	var tick <-chan time.Time
	if e.opts.PollInterval > 0 {
		t := time.NewTicker(e.opts.PollInterval)
		defer t.Stop()
		tick = t.C
	}
	var backoff time.Duration
	fails := 0
	for {
		select {
		case <-stop:
			return
		case <-e.dev.RxReady():
		case <-tick:
			e.dev.Poll()
		}
		var t0 int64
		if c := e.opts.Clock; c != nil {
			t0 = c()
		}
		n := int64(0)
		for {
			n++
			more, failed := e.rxBatch()
			if !failed {
				fails, backoff = 0, 0
			} else if fails++; fails > rxFailsBeforeBackoff {
				// The device keeps failing and gives nothing: a closed NIC
				// fails forever. Back off (doubling, up to rxMaxBackoff)
				// instead of spinning, and keep answering the stop signal.
				// (A few failures in a row are frames the NIC dropped.)
				backoff = min(max(2*backoff, rxMinBackoff), rxMaxBackoff)
				t := time.NewTimer(backoff)
				select {
				case <-stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if !more {
				break
			}
			select {
			case <-stop:
				return
			default:
			}
		}
		if c := e.opts.Clock; c != nil {
			e.rxNs.Add(c() - t0)
			e.rxBatches.Add(n)
		}
	}
}

// The receive loop's back-off once more than rxFailsBeforeBackoff batches
// in a row ended in a device error before any frame.
const (
	rxFailsBeforeBackoff = 8
	rxMinBackoff         = 100 * time.Microsecond
	rxMaxBackoff         = 10 * time.Millisecond
)

// rxBatch handles up to RxBudget frames and flushes GRO. more reports
// whether frames may be left (the budget ran out, or an error ended the
// batch); failed that the batch ended with an error before any frame.
// A Receive error ends the batch: a device that fails persistently
// (closed) would otherwise be called millions of times a second.
func (e *Endpoint) rxBatch() (more, failed bool) {
	e.mu.Lock()
	d := e.dispatcher
	e.mu.Unlock()
	if d == nil {
		return false, false
	}
	if e.gate != nil {
		if !e.gate.BeginRx() {
			return false, false
		}
		defer e.gate.EndRx()
	}
	addr := e.LinkAddress()
	if pk, ok := e.dev.(RxPeeker); ok && e.opts.AckFilter {
		return e.rxBatchPeek(d, pk, addr)
	}
	return e.rxBatchTake(d, addr, e.opts.AckFilter)
}

// rxBatchTake takes up to RxBudget frames from the device and hands them
// up; with filter, the whole batch is taken first and its superseded ACKs
// dropped.
func (e *Endpoint) rxBatchTake(d stack.NetworkDispatcher, addr tcpip.LinkAddress, filter bool) (more, failed bool) {
	more = true // until the NIC says it has nothing left
	// With the ACK filter the whole batch is taken first, so that ACKs
	// superseded within it can be dropped (see ackfilter.go); without it,
	// each frame goes up as it is taken.
	b := e.rx.batch[:0]
	got := 0
	for i := 0; i < e.opts.RxBudget; i++ {
		f, err := e.dev.Receive()
		if err != nil {
			e.count(func(s *Stats) { s.RxNICErrors++ })
			failed = got == 0
			break
		}
		if f == nil {
			more = false
			break
		}
		got++
		if !filter {
			e.deliver(d, f, addr)
			continue
		}
		b = append(b, f)
	}
	if len(b) > 0 {
		slots := e.rx.slots[:len(b)]
		if n := filterACKs(b, slots, e.ackTrusted); n > 0 {
			e.count(func(s *Stats) { s.RxACKsFiltered += uint64(n) })
		}
		for i, f := range b {
			if slots[i].drop {
				f.Release()
				continue
			}
			e.deliver(d, f, addr)
		}
		clear(b) // drop references to released frames
	}
	e.flushGRO()
	return more, failed
}

// rxBatchPeek is rxBatch with the ACK filter on a device that shows its
// waiting frames in place: the run of good frames waiting (up to the
// budget) is classified where it lies, superseded ACKs are dropped there
// (RxPeeker.DropRx), and only the rest is taken and handed up, in order.
// The run ends at the first frame too long to be an ACK (not shown) or one
// Receive must report (an error); when the batch starts with one, the
// batch is taken without filtering (a bulk receive sees no ACKs to drop,
// and would otherwise pay a look at every frame).
func (e *Endpoint) rxBatchPeek(d stack.NetworkDispatcher, pk RxPeeker, addr tcpip.LinkAddress) (more, failed bool) {
	m, stop := pk.PeekRun(e.rx.peeked[:e.opts.RxBudget], maxACKFrame)
	// The slices in locals: classify is a call, after which fields of e
	// would be loaded again for every frame.
	slots, peeked := e.rx.slots[:m], e.rx.peeked[:m]
	for k := range slots {
		slots[k].classify(peeked[k].B)
	}
	if stop == PeekFrame {
		stop = PeekNone // out is full: the batch ends at the budget
		if m < e.opts.RxBudget {
			stop = PeekOther // the next frame is too long to be an ACK: not shown
		}
	}
	if m == 0 {
		if stop == PeekNone {
			return false, false
		}
		return e.rxBatchTake(d, addr, false)
	}
	dropped := filterSlots(slots, func(j int) bool {
		_, v := e.softVerify(peeked[j].B, peeked[j].IPv4OK, peeked[j].L4OK)
		return v != verdictBad
	})
	if dropped > 0 {
		e.count(func(s *Stats) { s.RxACKsFiltered += uint64(dropped) })
	}
	clear(peeked) // the device's memory is not ours past this point
	more = m == e.opts.RxBudget || stop == PeekOther
	// Consecutive superseded ACKs are dropped in one call: one lock, one
	// barrier and one RDAR write per run instead of per ACK.
	for k := 0; k < m; {
		var err error
		j := k
		for j < m && slots[j].drop {
			j++
		}
		if j > k {
			err = pk.DropRx(j - k)
		} else {
			j = k + 1
			var f Frame
			if f, err = e.dev.Receive(); err == nil && f == nil {
				err = errPeekedGone
			}
			if err == nil {
				e.deliver(d, f, addr)
			}
		}
		if err != nil {
			// A frame PeekRun showed failed (no buffer to hand it up in, a
			// closed device, a restart since the peek): end the batch, as
			// rxBatch does.
			e.count(func(s *Stats) { s.RxNICErrors++ })
			more, failed = true, k == 0
			break
		}
		k = j
	}
	e.flushGRO()
	return more, failed
}

// errPeekedGone: a frame PeekRun showed was not there for Receive.
var errPeekedGone = errors.New("netstack: a peeked frame was gone")

// ackTrusted reports whether a pure ACK's checksums are good: checked by
// the hardware, or here (softVerify; a frame classifyACK accepted always
// parses, so only a bad checksum makes it untrusted).
func (e *Endpoint) ackTrusted(f Frame) bool {
	ipOK, l4OK := f.Verified()
	_, v := e.softVerify(f.Bytes(), ipOK, l4OK)
	return v != verdictBad
}

// rxAlign is where a received frame starts in its gVisor buffer: 2 bytes
// in, as Linux's NET_IP_ALIGN, so that the IP header and a TCP payload
// after a 32-byte TCP header (timestamps) start on a word. The ENET puts
// frames 2 bytes into its buffers (SHIFT16) for the same reason.
const rxAlign = 2

// alignedView copies frame b into a new gVisor view rxAlign bytes into its
// chunk (whose data is word aligned), with b's address alignment
// mod 4 then matching the view's. On 32-bit ARM the runtime's memmove
// copies 32 bytes in 5 instructions when source and destination are
// equally aligned and 16 bytes in 13 when not (shifting every word), and
// that holds for this copy and for the application's read of the payload
// later: a 1514-byte frame at SHIFT16's offset 2 copied to offset 0 took
// the slow path for both.
func alignedView(b []byte) *buffer.View {
	v := buffer.NewViewSize(len(b) + rxAlign)
	copy(v.AsSlice()[rxAlign:], b)
	v.TrimFront(rxAlign)
	return v
}

// alignedViewSum is alignedView that also returns the sum (pkt.Sum) of
// b[from:], summed while it is copied: the TCP or UDP segment whose
// checksum the hardware did not verify. On ARM that pass costs about what
// summing alone did (pkt.CopySum), saving the separate copy's memmove.
func alignedViewSum(b []byte, from int) (*buffer.View, uint32) {
	v := buffer.NewViewSize(len(b) + rxAlign)
	d := v.AsSlice()[rxAlign:]
	copy(d[:from], b[:from])
	s := pkt.CopySum(d[from:], b[from:])
	v.TrimFront(rxAlign)
	return v, s
}

// deliver copies a frame once into a gVisor buffer and hands it up.
func (e *Endpoint) deliver(d stack.NetworkDispatcher, f Frame, addr tcpip.LinkAddress) {
	b := f.Bytes()
	if len(b) < header.EthernetMinimumSize {
		f.Release()
		e.count(func(s *Stats) { s.RxRunts++ })
		return
	}
	eth := header.Ethernet(b)
	proto := eth.Type()
	switch proto {
	case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber, header.ARPProtocolNumber:
	default:
		f.Release()
		e.count(func(s *Stats) { s.RxUnknownType++ })
		return
	}
	var (
		h pkt.Headers
		v *buffer.View
	)
	if e.opts.GRO && proto != header.ARPProtocolNumber {
		// RX offload is advertised: everything the hardware did not check
		// is checked here.
		ipOK, l4OK := f.Verified()
		var hv verdict
		v, hv = e.copyVerified(&h, b, ipOK, l4OK)
		switch hv {
		case verdictBad:
			f.Release()
			e.count(func(s *Stats) { s.RxBadCsum++ })
			return
		case verdictSoft:
			e.count(func(s *Stats) { s.RxSoftCsum++ })
		}
	} else {
		v = alignedView(b)
	}
	f.Release()
	// From here on b is the copy: Release may have handed the device's
	// buffer back (a later Receive, another goroutine's, could refill it).
	b = v.AsSlice()
	p := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(v)})
	e.count(func(s *Stats) { s.RxPackets++; s.RxBytes += uint64(len(b)) })
	p.LinkHeader().Consume(header.EthernetMinimumSize)
	p.NetworkProtocolNumber = proto
	switch dst := b[:6]; {
	case dst[0] == 0xFF && string(dst) == string(header.EthernetBroadcastAddress):
		p.PktType = tcpip.PacketBroadcast
	case dst[0]&1 != 0:
		p.PktType = tcpip.PacketMulticast
	case string(dst) == string(addr):
		p.PktType = tcpip.PacketHost
	default:
		p.PktType = tcpip.PacketOtherHost
	}
	if !e.opts.GRO {
		d.DeliverNetworkPacket(proto, p)
		p.DecRef()
		return
	}
	p.RXChecksumValidated = true
	switch {
	case h.Fragment:
		// Fragments of any protocol are held until their datagram is
		// complete and its TCP or UDP checksum verified (fragcheck.go).
		// They go up with no checksum verdict even when fragCheck
		// verified the datagram: gVisor drops some fragments before its
		// reassembler (an IPv6 first fragment without an upper-layer
		// header, an IPv4 fragment with options it refuses, lengths it
		// refuses) and keeps the others, and with gVisor's IPv4 ID 0 the
		// next datagram of the flow completes those leftovers. A verdict
		// given for the set fragCheck saw would then cover a mix of two
		// datagrams (a review found "aaaaaaaa"+"g"*32 delivered); without
		// one, gVisor checks what it reassembled.
		ready, dropped := e.frag.add(b, h, p)
		if dropped > 0 {
			e.count(func(s *Stats) { s.RxFragDrops += uint64(dropped) })
		}
		for _, q := range ready {
			e.deliverUnverified(d, proto, q)
			q.DecRef()
		}
		return
	case h.Proto == pkt.ProtoTCP:
		// GRO merges only TCP. Everything else bypasses it: this gVisor's
		// gro.dispatch6 leaks a buffer clone for every IPv6 packet that is
		// not TCP (found by the leak checker in TestUDPDatagramsUpTo64KiB).
		if e.order.bypass(b, &h) {
			// A segment of a flow with a hole: delivered on its own, after
			// whatever GRO holds, so each draws its duplicate ACK.
			e.flushGRO()
			d.DeliverNetworkPacket(proto, p)
			e.count(func(s *Stats) { s.RxGROBypass++ })
		} else {
			e.gro.Enqueue(p)
		}
	case h.Proto == pkt.ProtoUDP:
		d.DeliverNetworkPacket(proto, p)
	default:
		// No TCP or UDP header found (ARP, ICMP, another protocol, or a
		// header the parser does not walk): nothing was verified here.
		e.deliverUnverified(d, proto, p)
	}
	p.DecRef()
}
