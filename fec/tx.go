package fec

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/tso"
)

// SlotSize is the aligned scratch area of each TX descriptor: a TSO header
// or a misaligned fragment head (Linux's TSO_HEADER_SIZE).
const SlotSize = 256

// TxOptions qualify one frame.
type TxOptions struct {
	// Csum asks the MAC to insert the IPv4 header checksum and the TCP or
	// UDP checksum (not for IP fragments, whose transport checksum the
	// caller computes). The driver zeroes both fields in the caller's first
	// fragment, as the hardware requires; the L2-L4 headers up to the
	// transport checksum must lie in that fragment.
	Csum bool
}

// txSlot is the software state of one TX descriptor.
type txSlot struct {
	mapped dma.Buffer // in-place mapping, unmapped at completion
	// Copied bytes: the scratchLen bytes at scratchOff of scratch (the
	// slot or bounce allocation), synced back at completion. Buffers are
	// never copied on this path: a copy costs a runtime.duffcopy call on
	// GOARM=7.
	scratch                *dma.Buffer
	scratchOff, scratchLen int
	// What the descriptor points at, and whether mapped is set.
	addr      dma.Addr
	hasMapped bool
	last      bool // completes the caller's frame or GSO packet
	cookie    any
	err       error // reported with the completion (a GSO packet cut short)
}

type txRing struct {
	mu     sync.Mutex
	desc   dma.Buffer
	r      ring
	slots  []txSlot
	slotAr dma.Buffer // n * SlotSize
	bncAr  dma.Buffer // n * bncLen
	bncLen int
	// The CPU views of slotAr and bncAr: reading them through the
	// Buffers' methods copied the Buffer each time.
	slotMem, bncMem   []byte
	slotAddr, bncAddr dma.Addr
	// cur is the next descriptor to fill, dirty the oldest one in flight.
	cur, dirty, inFlight int
	strategy             bounce.Strategy
	placer               bounce.Placer
	plan                 bounce.Plan
	seg                  tso.Segmenter
	// While a GSO packet is built (holding), post leaves the status word
	// of the packet's first descriptor unwritten: held, its index, and
	// heldLS, the word. publishHeld writes it after one barrier, so the
	// uDMA, which stops at that descriptor, never sees part of the packet
	// and the segments need no barrier each.
	holding bool
	held    int
	heldLS  uint32
	gso     gsoCounts // post's counts of the GSO packet being built
	done    []txDone  // completions not yet delivered
	pool    sync.Pool // of *[]txDone: delivery buffers swapped in for done
	stats   TxStats
}

// Scratch for bounce.Placer: memory of the j-th descriptor of the frame
// being built.
func (t *txRing) Slot(j int) []byte {
	i := t.r.add(t.cur, j)
	return t.slotMem[i*SlotSize : (i+1)*SlotSize]
}

func (t *txRing) Bounce(j int) []byte {
	i := t.r.add(t.cur, j)
	return t.bncMem[i*t.bncLen : (i+1)*t.bncLen]
}

func (t *txRing) alloc(n *NIC) error {
	var err error
	cnt := n.cfg.TxRing
	t.r = ring{size: n.descSize(), n: cnt}
	if t.desc, err = n.mem.Alloc(cnt*t.r.size, n.cfg.Caps.RingAlign, dma.Coherent); err != nil {
		return fmt.Errorf("fec: TX ring: %w", err)
	}
	t.r.mem = t.desc.Bytes()
	t.bncLen = dma.AlignUp(n.cfg.MaxFrame, dma.CacheLine)
	if t.slotAr, err = n.mem.Alloc(cnt*SlotSize, 64, dma.Cached); err != nil {
		return fmt.Errorf("fec: TX header slots: %w", err)
	}
	if t.bncAr, err = n.mem.Alloc(cnt*t.bncLen, 64, dma.Cached); err != nil {
		return fmt.Errorf("fec: TX bounce buffers: %w", err)
	}
	t.slotMem, t.bncMem = t.slotAr.Bytes(), t.bncAr.Bytes()
	t.slotAddr, t.bncAddr = t.slotAr.Addr(), t.bncAr.Addr()
	t.slots = make([]txSlot, cnt)
	t.done = make([]txDone, 0, cnt)
	t.pool.New = func() any { s := make([]txDone, 0, 64); return &s }
	t.strategy = n.cfg.Strategy
	t.placer = bounce.Placer{Align: max(n.cfg.Caps.TxAlign, 1), MaxDescs: n.cfg.MaxTxDescs}
	return nil
}

func (t *txRing) free(n *NIC) error {
	var errs []error
	for _, b := range []dma.Buffer{t.desc, t.slotAr, t.bncAr} {
		if b.Valid() {
			errs = append(errs, n.mem.Free(b))
		}
	}
	t.desc, t.slotAr, t.bncAr = dma.Buffer{}, dma.Buffer{}, dma.Buffer{}
	t.slotMem, t.bncMem = nil, nil
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// takeDone hands over the pending completions for delivery outside the
// lock, leaving an empty list in their place. Called with mu held; nil when
// there is nothing to deliver.
func (t *txRing) takeDone() *[]txDone {
	if len(t.done) == 0 {
		return nil
	}
	p := t.pool.Get().(*[]txDone)
	out := t.done
	t.done = (*p)[:0]
	*p = out
	return p
}

// reset releases every descriptor (frames in flight complete with
// ErrAborted) and rebuilds the ring empty. The MAC must be stopped.
func (t *txRing) reset(n *NIC) {
	for t.inFlight > 0 {
		t.release(n, t.dirty, ErrAborted)
		t.dirty = t.r.add(t.dirty, 1)
		t.inFlight--
	}
	for i := 0; i < t.r.n; i++ {
		for w := 0; w < t.r.size; w += 4 {
			t.r.store(i, w, 0)
		}
	}
	t.r.store(t.r.n-1, dwLenStatus, lenStatus(0, uint16(TX_W)))
	t.cur, t.dirty = 0, 0
}

// release undoes the mappings of descriptor i and queues its completion.
func (t *txRing) release(n *NIC, i int, err error) {
	s := &t.slots[i]
	// Fields are cleared one by one, only when set: zeroing the whole
	// slot costs a runtime.duffzero call per descriptor on GOARM=7.
	if s.hasMapped {
		if uerr := n.mem.Unmap(&s.mapped, dma.ToDevice); uerr != nil && err == nil {
			err = uerr
		}
		s.hasMapped = false
	}
	if s.scratch != nil {
		n.mem.SyncForCPU(s.scratch, s.scratchOff, s.scratchLen, dma.ToDevice)
		s.scratch = nil
	}
	if s.last {
		if err == nil {
			err = s.err
		}
		t.done = append(t.done, txDone{cookie: s.cookie, err: err})
		s.last, s.cookie, s.err = false, nil, nil
	}
}

// SetStrategy switches TX placement; frames already queued are unaffected.
func (n *NIC) SetStrategy(s bounce.Strategy) {
	n.tx.mu.Lock()
	n.tx.strategy = s
	n.tx.mu.Unlock()
}

// Strategy returns the current TX placement strategy.
func (n *NIC) Strategy() bounce.Strategy {
	n.tx.mu.Lock()
	defer n.tx.mu.Unlock()
	return n.tx.strategy
}

// TxFree returns the number of free TX descriptors.
func (n *NIC) TxFree() int {
	n.tx.mu.Lock()
	defer n.tx.mu.Unlock()
	return n.tx.r.n - n.tx.inFlight
}

// Transmit queues one frame made of frags (in wire order, without FCS). The
// memory of frags must stay unchanged until OnTxDone reports the frame:
// fragments may be sent in place. cookie is handed to OnTxDone.
//
// It fails, with nothing queued and nothing dropped, with an error wrapping
// ErrRingFull when the ring has fewer than MaxTxDescs free descriptors after
// reclaiming; the caller keeps the frame and retries after a completion.
func (n *NIC) Transmit(frags [][]byte, opts TxOptions, cookie any) error {
	t := &n.tx
	t.mu.Lock()
	err := n.transmitLocked(frags, opts, cookie)
	done := t.takeDone()
	t.mu.Unlock()
	n.complete(done)
	return err
}

func (n *NIC) transmitLocked(frags [][]byte, opts TxOptions, cookie any) error {
	t := &n.tx
	if !t.desc.Valid() {
		return ErrClosed
	}
	total := 0
	for _, f := range frags {
		total += len(f)
	}
	if total < 14 {
		t.stats.TooShort++
		return fmt.Errorf("%w: %d bytes", ErrFrameShort, total)
	}
	if total > n.cfg.MaxFrame {
		t.stats.TooLong++
		return fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLong, total, n.cfg.MaxFrame)
	}
	if t.r.n-t.inFlight < n.cfg.MaxTxDescs {
		t.reclaimLocked(n)
		if t.r.n-t.inFlight < n.cfg.MaxTxDescs {
			t.stats.RingFull++
			return fmt.Errorf("%w: %d of %d descriptors in flight", ErrRingFull, t.inFlight, t.r.n)
		}
	}
	if opts.Csum {
		if !n.CsumOffload() {
			return ErrNoCsum
		}
		if err := zeroCsums(frags[0]); err != nil {
			t.stats.CsumErrors++
			return err
		}
	}
	if err := t.placer.Place(t.strategy, frags, t, &t.plan); err != nil {
		return fmt.Errorf("fec: placing %d-byte frame: %w", total, err)
	}
	var ext uint32
	if opts.Csum {
		ext = TXE_PINS | TXE_IINS
	}
	if err := n.post(ext, true, cookie, 0); err != nil {
		return err
	}
	n.kickTx()
	return nil
}

// zeroCsums clears the IPv4 header checksum and the TCP/UDP checksum, which
// the MAC computes (pseudo-header included) over zeroed fields.
func zeroCsums(f []byte) error {
	h, err := pkt.Parse(f)
	if err != nil && err != pkt.ErrTruncated {
		return fmt.Errorf("%w: %v", ErrCsumHeader, err)
	}
	if err == pkt.ErrTruncated || h.CsumOff+2 > len(f) {
		return fmt.Errorf("%w: first fragment is %d bytes", ErrCsumHeader, len(f))
	}
	if !h.IPv6 {
		f[h.L3+10], f[h.L3+11] = 0, 0
	}
	if h.CsumOff >= 0 {
		f[h.CsumOff], f[h.CsumOff+1] = 0, 0
	}
	return nil
}

// post maps and publishes the frame in t.plan. Slots of the frame are not
// marked last until published, so releasing them on failure reports
// nothing.
// built is how many leading bytes of the plan's first segment are a header
// built in place (TSO) rather than bytes copied from the caller.
func (n *NIC) post(ext uint32, owner bool, cookie any, built int) error {
	t := &n.tx
	segs := t.plan.Segments()
	var cleaned uint32
	// Map and sync everything first, so a failure leaves the ring untouched.
	// Slots are filled in place: a dma.Buffer is six words, and copying
	// one costs a runtime.duffcopy call on GOARM=7.
	for j := range segs {
		i := t.r.add(t.cur, j)
		sl := &t.slots[i]
		s := &segs[j]
		var addr dma.Addr
		if s.Copied {
			addr = t.scratchBuf(sl, s.Data)
			n.mem.SyncForDevice(sl.scratch, sl.scratchOff, sl.scratchLen, dma.ToDevice)
		} else {
			if err := n.mem.Map(&sl.mapped, s.Data, dma.ToDevice); err != nil {
				t.stats.MapErrors++
				for k := 0; k < j; k++ {
					t.release(n, t.r.add(t.cur, k), nil)
				}
				*sl = txSlot{}
				return fmt.Errorf("fec: mapping fragment of %d bytes: %w", len(s.Data), err)
			}
			sl.hasMapped = true
			addr = sl.mapped.Addr()
		}
		sl.addr = addr
		if addr>>32 != 0 {
			for k := 0; k <= j; k++ {
				t.release(n, t.r.add(t.cur, k), nil)
			}
			return ErrNot32Bit
		}
		// dma.LineSpan in 32-bit arithmetic (addr fits, checked above):
		// 64-bit arithmetic costs twice the instructions on GOARM=7.
		a := uint32(addr)
		cleaned += (a+uint32(len(s.Data))+dma.CacheLine-1)&^(dma.CacheLine-1) - a&^(dma.CacheLine-1)
	}
	last := len(segs) - 1
	// Descriptors after the first get R as they are written; the first is
	// published last so the uDMA never sees a partial frame.
	for j := last; j >= 0; j-- {
		i := t.r.add(t.cur, j)
		sl := &t.slots[i]
		st := TX_TC
		e := ext
		if j == last {
			st |= TX_L
			if owner {
				e |= TXE_INT
				sl.last, sl.cookie = true, cookie
			}
		}
		if i == t.r.n-1 {
			st |= TX_W
		}
		d := t.r.at(i)
		if n.enhanced {
			storeExt(d, uint32(sl.addr), e)
		} else {
			storeWord(descWord(d, dwAddr), uint32(sl.addr))
		}
		ls := lenStatus(len(segs[j].Data), uint16(st|TX_R))
		if j == 0 {
			if t.holding {
				if t.held < 0 {
					t.held, t.heldLS = i, ls
					continue
				}
				// A later segment of the packet: the uDMA cannot pass the
				// held descriptor before publishHeld's barrier.
			} else {
				n.mem.Barrier()
			}
		}
		storeWord(descWord(d, dwLenStatus), ls)
	}
	// No barrier here: kickTx issues the one the doorbell needs, once per
	// frame or GSO packet rather than once per segment.
	t.cur = t.r.add(t.cur, len(segs))
	t.inFlight += len(segs)
	if t.holding {
		// A GSO segment: counted in native words, added to the 64-bit
		// statistics once per packet (addGSOCounts).
		g := &t.gso
		g.frames++
		g.bytes += uint32(t.plan.Len)
		g.descs += uint32(len(segs))
		g.copied += uint32(t.plan.Copied - built)
		g.headerBytes += uint32(built)
		g.cleaned += cleaned
		if t.plan.Bounce {
			g.bounced++
		} else if t.plan.Copied == 0 {
			g.direct++
		}
		return nil
	}
	t.stats.Cleaned += uint64(cleaned)
	t.stats.Frames++
	t.stats.Bytes += uint64(t.plan.Len)
	t.stats.Descs += uint64(len(segs))
	t.stats.Copied += uint64(t.plan.Copied - built)
	t.stats.HeaderBytes += uint64(built)
	if t.plan.Bounce {
		t.stats.Bounced++
	} else if t.plan.Copied == 0 {
		t.stats.Direct++
	}
	return nil
}

// gsoCounts are post's statistics of one GSO packet's segments. A packet
// has at most tso.MaxSegments segments of at most 64 KiB in all, so
// 32 bits hold them.
type gsoCounts struct {
	frames, bytes, descs, copied, headerBytes, cleaned, direct, bounced uint32
}

// addGSOCounts adds the counts of the GSO packet just posted to the
// statistics and clears them.
func (t *txRing) addGSOCounts() {
	g := &t.gso
	t.stats.Frames += uint64(g.frames)
	t.stats.Bytes += uint64(g.bytes)
	t.stats.Descs += uint64(g.descs)
	t.stats.Copied += uint64(g.copied)
	t.stats.HeaderBytes += uint64(g.headerBytes)
	t.stats.Cleaned += uint64(g.cleaned)
	t.stats.Direct += uint64(g.direct)
	t.stats.Bounced += uint64(g.bounced)
	*g = gsoCounts{}
}

// publishHeld makes the descriptor post held back ready, after a barrier
// that orders every store of the packet before it, and ends the hold.
func (n *NIC) publishHeld() {
	t := &n.tx
	if t.held >= 0 {
		n.mem.Barrier()
		storeWord(descWord(t.r.at(t.held), dwLenStatus), t.heldLS)
	}
	t.holding, t.held = false, -1
	t.addGSOCounts()
}

// scratchBuf records in sl where data, bytes copied into a slot or bounce
// buffer, lie in their allocation, and returns their device address.
func (t *txRing) scratchBuf(sl *txSlot, data []byte) dma.Addr {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	sl.scratchLen = len(data)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(t.slotMem)))
	if p >= base && p < base+uintptr(len(t.slotMem)) {
		sl.scratch, sl.scratchOff = &t.slotAr, int(p-base)
		return t.slotAddr + dma.Addr(p-base)
	}
	bb := uintptr(unsafe.Pointer(unsafe.SliceData(t.bncMem)))
	sl.scratch, sl.scratchOff = &t.bncAr, int(p-bb)
	return t.bncAddr + dma.Addr(p-bb)
}

// kickTx tells the uDMA descriptors are ready. ERR007885: read TDAR up to
// four times and write only if a read returns 0; if it stays set the uDMA is
// still walking the ring and will find the new descriptors.
func (n *NIC) kickTx() {
	// The descriptors reach memory before the uDMA is told (wmb).
	n.mem.Barrier()
	if n.err007885 {
		for k := 0; k < 4; k++ {
			if n.regs.Read32(ENETx_TDAR) == 0 {
				n.regs.Write32(ENETx_TDAR, DAR_ACTIVE)
				return
			}
		}
		n.tx.stats.KicksSkipped++
		return
	}
	n.regs.Write32(ENETx_TDAR, DAR_ACTIVE)
}

// Reclaim collects completed TX descriptors, releases their memory and
// reports finished frames to OnTxDone. Interrupt and Poll call it; a caller
// that waits on a full ring may call it too.
func (n *NIC) Reclaim() int {
	t := &n.tx
	t.mu.Lock()
	c := t.reclaimLocked(n)
	done := t.takeDone()
	t.mu.Unlock()
	n.complete(done)
	return c
}

func (t *txRing) reclaimLocked(n *NIC) int {
	// The cursor in locals, written back once: release is a call, so
	// t.dirty and t.inFlight were loaded and stored around it for every
	// descriptor.
	dirty, left := t.dirty, t.inFlight
	for ; left > 0; left-- {
		i := dirty
		d := t.r.at(i)
		ls := loadWord(descWord(d, dwLenStatus))
		if TxStatus(ls>>16)&TX_R != 0 {
			break
		}
		var err error
		if t.slots[i].last && n.enhanced {
			// R may clear before the error status and BDU are written
			// (Table 22-37): wait for BDU before reading the frame's status.
			if loadWord(descWord(d, dwExt2))&BDU == 0 {
				break
			}
			rmb() // the error status is read after BDU (see rxRing.peekable)
			if e := loadWord(descWord(d, dwExt0)); e&TXE_TXE != 0 {
				err = t.txError(e)
			}
		}
		t.release(n, i, err)
		dirty = t.r.add(dirty, 1)
	}
	c := t.inFlight - left
	t.dirty, t.inFlight = dirty, left
	// ERR006358: descriptors still ready but TDAR fell to 0: kick again.
	// Linux's fec_enet_tx_queue does this on every SoC, not only on the
	// i.MX6Q/DL the erratum is filed for: a missed kick strands frames on
	// any of them (the ERR007885 kick rule can skip a kick the uDMA then
	// misses).
	if t.inFlight > 0 && n.regs.Read32(ENETx_TDAR) == 0 {
		n.regs.Write32(ENETx_TDAR, DAR_ACTIVE)
		t.stats.Rekicks++
	}
	return c
}

func (t *txRing) txError(e uint32) error {
	t.stats.Errors++
	switch {
	case e&TXE_UE != 0:
		t.stats.Underflow++
	case e&TXE_LCE != 0:
		t.stats.LateCollision++
	case e&TXE_EE != 0:
		t.stats.ExcessCollision++
	case e&TXE_FE != 0:
		t.stats.FrameError++
	}
	return fmt.Errorf("%w: status %#04x", ErrTxFailed, e&0xFFFF)
}

// DumpTx describes the TX ring, for failure messages.
func (n *NIC) DumpTx() string {
	n.tx.mu.Lock()
	defer n.tx.mu.Unlock()
	return n.tx.r.dumpTx(n.tx.cur, n.tx.dirty)
}
