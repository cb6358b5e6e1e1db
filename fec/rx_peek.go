package fec

import (
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// PeekState says what Peek found.
type PeekState int

// What Peek found at a ring position.
const (
	// PeekNone: no complete frame waits there (yet).
	PeekNone PeekState = iota
	// PeekFrame: a good frame waits there, shown in place.
	PeekFrame
	// PeekOther: a frame Receive will drop and report (an error, one that
	// spans buffers), or the ring is closed: take it with Receive.
	PeekOther
)

// Peek shows the k-th frame waiting in the RX ring (0: the one Receive
// returns next), in place in its DMA buffer, without taking it, so a caller
// can decide to drop it before it is copied or handed up (an ACK filter).
// Only a run of good frames can be peeked: the caller peeks k = 0, 1, ...
// and stops at the first result that is not PeekFrame. A good frame longer
// than max bytes is reported (PeekFrame) but not shown (data nil, nothing
// synced for the CPU: on silicon, invalidating a full frame twice, here and
// in Receive, would cost more than the look saves). data is valid until
// that frame is taken by Receive or dropped by DropNext; the caller must
// not write it. k must be below the ring size.
func (n *NIC) Peek(k, max int) (data []byte, csum CsumInfo, st PeekState) {
	r := &n.rx
	r.mu.Lock()
	if r.closed || k < 0 || k >= r.r.n {
		r.mu.Unlock()
		return nil, CsumInfo{}, PeekOther
	}
	i := r.r.add(r.cur, k)
	length, off, e0, e1, st := r.peekable(n, i)
	if st == PeekFrame && k == r.shown {
		r.shown = k + 1
	}
	if st != PeekFrame || length-4-off > max {
		r.mu.Unlock()
		return nil, CsumInfo{}, st
	}
	b := &r.bufs[i]
	n.mem.SyncForCPU(b, 0, min(dma.AlignUp(length, dma.CacheLine), n.rxBufLen), dma.FromDevice)
	csum, _ = n.rxVerdict(e0, e1)
	data = b.Bytes()[off : length-4]
	r.mu.Unlock()
	return data, csum, PeekFrame
}

// PeekRun shows the run of good frames waiting at the head of the RX ring,
// up to limit of them (and at most the ring size), under one lock: show is
// called with k = 0, 1, ... and what Peek(k, max) would show, and must not
// keep data past that frame's Receive or DropNext nor write it. It returns
// how many frames it showed and why the run ended: PeekNone (no complete
// frame follows), PeekOther (a frame Receive must take, or a closed ring)
// or PeekFrame (limit reached, or the next frame is longer than max: it is
// not shown, as in Peek). One call instead of a Peek per frame saves a
// lock and an unlock per frame.
func (n *NIC) PeekRun(limit, max int, show func(k int, data []byte, csum CsumInfo)) (m int, st PeekState) {
	r := &n.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, PeekOther
	}
	limit = min(limit, r.r.n)
	i := r.cur
	for m = 0; m < limit; m++ {
		length, off, e0, e1, st := r.peekable(n, i)
		if st != PeekFrame || length-4-off > max {
			r.showRun(m)
			return m, st
		}
		b := &r.bufs[i]
		n.mem.SyncForCPU(b, 0, min(dma.AlignUp(length, dma.CacheLine), n.rxBufLen), dma.FromDevice)
		csum, _ := n.rxVerdict(e0, e1)
		show(m, b.Bytes()[off:length-4], csum)
		i = r.r.add(i, 1)
	}
	r.showRun(m)
	return m, PeekFrame
}

// showRun records that the m frames from cur on were found good.
func (r *rxRing) showRun(m int) {
	if m > r.shown {
		r.shown = m
	}
}

// peekable reports whether descriptor i holds a good frame, one Receive
// would hand up (the same checks, in the same order), and its length as
// the MAC reported it, the offset of its first byte and the enhanced
// words.
func (r *rxRing) peekable(n *NIC, i int) (length, off int, e0, e1 uint32, st PeekState) {
	if r.dropping {
		return 0, 0, 0, 0, PeekOther
	}
	d := r.r.at(i)
	ls := loadWord(descWord(d, dwLenStatus))
	rs := RxStatus(ls >> 16)
	if rs&RX_E != 0 {
		return 0, 0, 0, 0, PeekNone
	}
	if rs&RX_L == 0 {
		return 0, 0, 0, 0, PeekOther
	}
	if n.enhanced {
		// loadExt: BDU, then rmb, then the verdicts, in one call.
		var e2 uint32
		if e2, e0, e1 = loadExt(d); e2&BDU == 0 {
			return 0, 0, 0, 0, PeekNone // as Receive: not complete yet
		}
		// The uDMA writes the enhanced words before it sets BDU. TamaGo
		// maps the rings strongly ordered, whose loads are neither
		// reordered nor speculated, so this barrier costs little and
		// matters only where a board maps its rings Normal non-cacheable,
		// whose loads ARMv7 may perform in any order: without it the
		// verdicts could be read from before the update BDU announces
		// (Linux orders descriptor reads after an ownership check with
		// dma_rmb, e.g. mlx5_cqwq_get_cqe). The frame bytes need no more:
		// SyncForCPU ends with a DSB.
	}
	if rs&(RX_OV|RX_TR|RX_LG|RX_NO|RX_CR) != 0 || e0&rxeErrMask != 0 {
		return 0, 0, 0, 0, PeekOther
	}
	length = int(ls & 0xFFFF)
	if n.shift16 {
		off = 2
	}
	if plen := length - 4 - off; plen < 14 || plen > n.cfg.MaxFrame || length > n.rxBufLen {
		return 0, 0, 0, 0, PeekOther
	}
	return length, off, e0, e1, PeekFrame
}

// DropNext drops the frame Receive would return next, which the caller
// has seen with Peek or PeekRun: DropRun(1).
func (n *NIC) DropNext() error { return n.DropRun(1) }

// DropRun drops the next k frames Receive would return, all of which Peek
// (k = 0, 1, ... in order) or PeekRun showed since they last moved: their
// buffers go straight back to the uDMA, without a copy and without a
// Packet, under one lock, with one barrier before the status words and
// one before a single RDAR write. They are counted in RxStats.Skipped (and
// not in Frames). It drops nothing and fails with ErrNotPeekable when
// fewer than k frames are known good (none was peeked, a restart since
// the peek rebuilt the ring, or they were taken), and with ErrClosed on a
// closed ring.
func (n *NIC) DropRun(k int) error {
	r := &n.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if k <= 0 || k > r.shown {
		if k == 0 {
			return nil
		}
		return fmt.Errorf("%w: %d frames to drop, %d shown", ErrNotPeekable, k, r.shown)
	}
	// Each frame was found good (E clear, BDU set) by the peek that
	// counted it, and the uDMA never writes a descriptor with E clear:
	// its length is still what the peek synced for the CPU.
	// fillWords and publish written out: neither can be inlined (each
	// calls an assembly store), and this runs for every superseded ACK.
	i := r.cur
	for j := 0; j < k; j++ {
		d := r.r.at(i)
		length := int(loadWord(descWord(d, dwLenStatus)) & 0xFFFF)
		b := &r.bufs[i]
		n.mem.SyncForDevice(b, 0, min(dma.AlignUp(length, dma.CacheLine), n.rxBufLen), dma.FromDevice)
		if n.enhanced {
			storeExt(d, uint32(b.Addr()), RXE_INT)
		} else {
			storeWord(descWord(d, dwAddr), uint32(b.Addr()))
		}
		i = r.r.add(i, 1)
	}
	n.mem.Barrier()
	i = r.cur
	for j := 0; j < k; j++ {
		storeWord(descWord(r.r.at(i), dwLenStatus), r.emptyStatus(i))
		i = r.r.add(i, 1)
	}
	r.cur = i
	r.shown -= k
	r.stats.Skipped += uint64(k)
	r.kick(n)
	return nil
}
