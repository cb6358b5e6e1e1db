package netstack

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/tso"
)

// WritePackets implements stack.LinkEndpoint. Each packet's memory goes to
// the NIC in place; the endpoint holds a reference on it until the NIC
// reports completion. A full ring stops the batch: the packets written so
// far are reported, or ErrNoBufferSpace if none.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if c := e.opts.Clock; c != nil {
		t0 := c()
		defer func() { e.txNs.Add(c() - t0); e.txCalls.Add(1) }()
	}
	e.txMu.Lock()
	defer e.txMu.Unlock()
	n := 0
	for _, p := range pkts.AsSlice() {
		err := e.writePacket(p)
		if _, full := err.(*tcpip.ErrNoBufferSpace); full {
			err = e.retryFull(p)
		}
		if err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		n++
	}
	return n, nil
}

// fullWait bounds how long WritePackets waits for completions to free
// descriptors before it refuses a packet with ErrNoBufferSpace.
const fullWait = 100 * time.Millisecond

// retryFull retries p, which the device refused with a full ring, each
// time a completion frees descriptors, for at most fullWait and only while
// packets are held (otherwise no completion will come). Linux stops the
// queue instead of dropping; refusing at once made gVisor drop the
// segment, and after bursts of such drops TCP through the 82574L models
// went on one retransmission timeout every 200 ms, 1-2 segments each
// (gVisor's counters), for 6-20 s and once over two minutes. Each refusal
// is still counted in TxRingFull.
func (e *Endpoint) retryFull(p *stack.PacketBuffer) tcpip.Error {
	var err tcpip.Error = &tcpip.ErrNoBufferSpace{}
	deadline := time.Now().Add(fullWait)
	for e.held.Load() > 0 && time.Now().Before(deadline) {
		e.awaitTxDone()
		if err = e.writePacket(p); err == nil {
			return nil
		}
		if _, full := err.(*tcpip.ErrNoBufferSpace); !full {
			return err
		}
	}
	return err
}

func (e *Endpoint) writePacket(p *stack.PacketBuffer) tcpip.Error {
	vl, off := p.AsViewList()
	e.frags = e.frags[:0]
	for v := vl.Front(); v != nil; v = v.Next() {
		b := v.AsSlice()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		e.frags = append(e.frags, b[off:])
		off = 0
	}
	size := p.Size()
	p.IncRef()
	e.held.Add(1)
	var err error
	gso := p.GSOOptions
	if gso.Type == stack.GSOTCPv4 || gso.Type == stack.GSOTCPv6 {
		// Every host-GSO packet goes to the segmenter, small ones too: their
		// checksum field holds a partial sum that must be finished.
		hl := p.HeaderSize()
		if len(e.frags) == 0 || len(e.frags[0]) < hl {
			err = fmt.Errorf("netstack: GSO packet headers not contiguous")
		} else {
			hdr := e.frags[0][:hl]
			rest := e.frags[0][hl:]
			payload := e.frags[1:]
			if len(rest) > 0 {
				payload = e.frags
				payload[0] = rest
			}
			l3 := len(p.LinkHeader().Slice())
			l4 := l3 + len(p.NetworkHeader().Slice())
			err = e.writeGSO(p, hdr, l3, l4, payload, tso.Options{Type: tso.TCP, MSS: int(gso.MSS),
				NeedsCsum: gso.NeedsCsum, CsumOffset: int(gso.CsumOffset)})
		}
	} else if e.info.TxCsum {
		// TX offload is advertised: gVisor left the transport checksum.
		err = e.writeCsum(p)
	} else {
		err = e.dev.Transmit(e.frags, false, p)
	}
	if err != nil {
		e.held.Add(-1)
		p.DecRef()
		if e.dev.Full(err) {
			e.count(func(s *Stats) { s.TxRingFull++ })
			return &tcpip.ErrNoBufferSpace{}
		}
		e.count(func(s *Stats) { s.TxErrors++ })
		return &tcpip.ErrMessageTooLong{}
	}
	e.count(func(s *Stats) {
		s.TxPackets++
		s.TxBytes += uint64(size)
		if gso.Type != stack.GSONone {
			s.TxGSOPackets++
		}
	})
	return nil
}

// gsoWait bounds how long writeGSO waits for descriptors in the middle of
// a split packet before it gives up on the rest (which TCP then sees as
// lost and retransmits).
const gsoWait = 500 * time.Millisecond

// writeGSO hands a host-GSO TCP packet (headers hdr, IP header at l3, TCP
// header at l4) to the device. What fits the device's limits goes whole.
// A packet that does not (more segments than MaxGSOSegments, which a small
// MSS makes of 64 KiB, or more views than MaxGSOViews, which many small
// writes make) is split into pieces that do, each with its own copy of the
// headers (sequence number advanced, IPv4 ID advanced by the segments
// before it, FIN and PSH only on the last piece, CWR only on the first),
// and a piece with too many views has them gathered into one buffer. The
// pieces are queued one after another; if the ring fills between them,
// writeGSO waits for completions (at most gsoWait). It returns an error
// only when nothing was queued.
func (e *Endpoint) writeGSO(p *stack.PacketBuffer, hdr []byte, l3, l4 int, payload [][]byte, o tso.Options) error {
	total := 0
	for _, v := range payload {
		total += len(v)
	}
	maxSegs := min(e.info.MaxGSOSegments, tso.MaxSegments)
	maxViews := max(1, e.info.MaxGSOViews)
	if o.MSS <= 0 || maxSegs < 1 || (total+o.MSS-1)/o.MSS <= maxSegs && len(payload) <= maxViews {
		return e.dev.TransmitGSO(hdr, payload, o, p)
	}
	h := &gsoHold{p: p}
	h.left.Store(1) // writeGSO's own, dropped at the end
	per := maxSegs * o.MSS
	var deadline time.Time
	view, voff, posted := 0, 0, 0
	for off := 0; off < total; off += per {
		n := min(per, total-off)
		var pieces [][]byte
		for k := n; k > 0; {
			v := payload[view][voff:]
			c := min(k, len(v))
			if c > 0 {
				pieces = append(pieces, v[:c])
			}
			k -= c
			if voff += c; voff == len(payload[view]) {
				view, voff = view+1, 0
			}
		}
		if len(pieces) > maxViews {
			buf := make([]byte, 0, n)
			for _, pc := range pieces {
				buf = append(buf, pc...)
			}
			pieces = [][]byte{buf}
			h.mem = append(h.mem, buf)
			e.count(func(s *Stats) { s.TxGathered++ })
		}
		hc := splitHeader(hdr, l3, l4, off, off/o.MSS, off == 0, off+n == total)
		h.mem = append(h.mem, hc)
		h.left.Add(1)
		err := e.dev.TransmitGSO(hc, pieces, o, h)
		for err != nil && posted > 0 && e.dev.Full(err) {
			if deadline.IsZero() {
				deadline = time.Now().Add(gsoWait)
			}
			if !time.Now().Before(deadline) {
				break
			}
			e.awaitTxDone()
			err = e.dev.TransmitGSO(hc, pieces, o, h)
		}
		if err != nil {
			h.left.Add(-1)
			if posted == 0 {
				return err // nothing queued: the caller still owns p
			}
			e.count(func(s *Stats) { s.TxCutShort++ })
			break
		}
		posted++
		e.count(func(s *Stats) { s.TxSplitPieces++ })
	}
	h.done(e)
	return nil
}

// splitHeader returns a copy of the TCP packet header hdr for the piece
// that starts off payload bytes (segs segments) into the packet.
func splitHeader(hdr []byte, l3, l4, off, segs int, first, last bool) []byte {
	hc := append([]byte(nil), hdr...)
	t := hc[l4:]
	binary.BigEndian.PutUint32(t[4:], binary.BigEndian.Uint32(t[4:])+uint32(off))
	const fin, psh, cwr = 0x01, 0x08, 0x80
	if !last {
		t[13] &^= fin | psh
	}
	if !first {
		t[13] &^= cwr
	}
	if hc[l3]>>4 == 4 {
		binary.BigEndian.PutUint16(hc[l3+4:], binary.BigEndian.Uint16(hc[l3+4:])+uint16(segs))
	}
	return hc
}

// gsoHold keeps the reference on a packet sent in pieces, and the memory
// the pieces use (header copies, gathered payload), until every piece is
// done.
type gsoHold struct {
	p    *stack.PacketBuffer
	left atomic.Int32
	mem  [][]byte
}

func (h *gsoHold) done(e *Endpoint) {
	if h.left.Add(-1) == 0 {
		h.mem = nil
		e.held.Add(-1)
		h.p.DecRef()
	}
}

// awaitTxDone waits for the next TX completion (txKick), or 1 ms at most
// should its signal be missed, before a refused transmit is retried.
func (e *Endpoint) awaitTxDone() {
	select {
	case <-e.txKick:
	case <-time.After(time.Millisecond):
	}
}

// txDone releases the reference taken in writePacket, exactly once.
func (e *Endpoint) txDone(cookie any, err error) {
	if err != nil {
		e.count(func(s *Stats) { s.TxErrors++ })
	}
	select {
	case e.txKick <- struct{}{}:
	default:
	}
	switch c := cookie.(type) {
	case *stack.PacketBuffer:
		e.held.Add(-1)
		c.DecRef()
	case *gsoHold:
		c.done(e)
	}
}
