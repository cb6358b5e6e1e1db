package fec

import (
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/tso"
)

// ErrGSOPartial is reported with the completion of a GSO packet of which
// only the first segments could be queued.
var ErrGSOPartial = errors.New("fec: GSO packet cut short")

// GSOBudget returns the most descriptors a GSO packet of segs segments whose
// payload comes in views views can need: per segment one for the header
// (which the payload's misaligned head joins) and one for the aligned rest,
// plus two more wherever a segment straddles a view boundary.
func GSOBudget(segs, views int) int { return 2*segs + 2*views }

// MaxGSOSegments returns the most segments a GSO packet whose payload
// comes in up to views views can have and still fit the TX ring.
func (n *NIC) MaxGSOSegments(views int) int {
	return max(0, (n.tx.r.n-2*views)/2)
}

// TransmitGSO segments one large packet in software (TSO, UDP
// fragmentation or UDP GSO) and queues every segment: each segment's header
// is built by package tso directly in the aligned TX slot of its first
// descriptor, and its payload is referenced in place (only a misaligned
// head is copied, into that same slot). hdr is the packet's L2-L4 header,
// payload its data in any number of views; their memory must stay
// unchanged until OnTxDone reports cookie, once, after the last segment.
//
// Checksums are inserted by the MAC when it can (o.Csum is overridden with
// tso.HardwareZero, or tso.Software without checksum offload). The packet is
// queued whole or not at all: ErrRingFull when the ring lacks GSOBudget
// descriptors.
func (n *NIC) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	t := &n.tx
	t.mu.Lock()
	err := n.transmitGSOLocked(hdr, payload, o, cookie)
	done := t.takeDone()
	t.mu.Unlock()
	n.complete(done)
	return err
}

func (n *NIC) transmitGSOLocked(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	t := &n.tx
	if !t.desc.Valid() {
		return ErrClosed
	}
	o.Csum = tso.Software
	if n.CsumOffload() {
		o.Csum = tso.HardwareZero
	}
	if err := t.seg.Init(hdr, payload, o); err != nil {
		t.stats.GSOErrors++
		return fmt.Errorf("fec: GSO: %w", err)
	}
	if max := t.seg.HeaderLen(0) + o.MSS; o.Type != tso.None && o.Type != tso.UDPFragment && max > n.cfg.MaxFrame {
		t.stats.GSOErrors++
		return fmt.Errorf("%w: GSO segments of %d bytes, max %d", ErrFrameTooLong, max, n.cfg.MaxFrame)
	}
	budget := GSOBudget(t.seg.Count(), len(payload))
	if budget > t.r.n {
		t.stats.GSOErrors++
		return fmt.Errorf("%w: GSO packet needs up to %d descriptors, ring has %d", ErrFrameTooLong, budget, t.r.n)
	}
	if t.r.n-t.inFlight < budget {
		t.reclaimLocked(n)
		if t.r.n-t.inFlight < budget {
			t.stats.RingFull++
			return fmt.Errorf("%w: GSO packet needs up to %d descriptors, %d free", ErrRingFull, budget, t.r.n-t.inFlight)
		}
	}
	var seg tso.Segment
	posted := 0
	t.holding, t.held = true, -1
	for {
		slot := t.Slot(0)
		err := t.seg.Next(slot, &seg)
		// err != nil first: errors.Is is a call even for nil, and this
		// runs once per segment.
		if err != nil && errors.Is(err, tso.ErrDone) {
			break
		}
		if err == nil {
			err = n.placeSegment(&seg, slot)
		}
		var ext uint32
		if seg.InsertIPCsum {
			ext |= TXE_IINS
		}
		if seg.InsertL4Csum {
			ext |= TXE_PINS
		}
		if err == nil {
			err = n.post(ext, seg.Last, cookie, min(len(seg.Header), t.plan.Copied))
		}
		if err != nil {
			t.stats.GSOErrors++
			if posted > 0 {
				// Segments already queued go out; the packet completes with
				// the error on the last of them.
				i := t.r.add(t.cur, t.r.n-1)
				t.slots[i].last, t.slots[i].cookie = true, cookie
				t.slots[i].err = fmt.Errorf("%w after %d of %d segments: %v", ErrGSOPartial, posted, t.seg.Count(), err)
				n.publishHeld()
				n.kickTx()
				return nil
			}
			n.publishHeld() // nothing held: ends the hold
			return fmt.Errorf("fec: GSO segment 0: %w", err)
		}
		posted++
	}
	t.stats.GSOPackets++
	t.stats.GSOSegments += uint64(posted)
	n.publishHeld()
	n.kickTx()
	return nil
}

// placeSegment lays out a segment whose header is already in slot, the
// slot of the next descriptor. Segments shorter than the minimum frame are
// flattened into the slot and padded with zeros.
func (n *NIC) placeSegment(seg *tso.Segment, slot []byte) error {
	t := &n.tx
	if seg.Len >= bounce.MinFrame {
		return t.placer.PlaceAfterHeaderIn(slot, len(seg.Header), seg.Payload, t, &t.plan)
	}
	o := len(seg.Header)
	for _, p := range seg.Payload {
		o += copy(slot[o:], p)
	}
	clear(slot[o:bounce.MinFrame])
	t.plan = bounce.Plan{N: 1, Len: bounce.MinFrame, Copied: bounce.MinFrame}
	t.plan.Segs[0] = bounce.Segment{Data: slot[:bounce.MinFrame], Copied: true}
	return nil
}
