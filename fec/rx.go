package fec

import (
	"fmt"
	"sync"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkt"
)

// CsumInfo is the hardware's RX checksum verdict. A field is true only when
// the MAC really checked that checksum and found it good.
type CsumInfo struct {
	IPv4 bool // IPv4 header checksum verified
	L4   bool // TCP or UDP checksum verified (pseudo-header included)
}

// Packet is a received frame (without FCS). Data stays valid until Release.
type Packet struct {
	Data []byte
	Csum CsumInfo

	nic   *NIC
	buf   dma.Buffer // zero-copy: the ring buffer itself
	small []byte     // copybreak: the pooled copy
	held  bool
}

// Release returns the packet's memory to the driver. Releasing twice is an
// error (counted), never a corruption.
func (p *Packet) Release() error {
	n := p.nic
	r := &n.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if !p.held {
		r.stats.DoubleRelease++
		return ErrReleased
	}
	if p.buf.Valid() {
		if r.closed {
			n.mem.SyncForCPU(&p.buf, 0, p.buf.Len(), dma.FromDevice)
			_ = n.mem.Free(p.buf)
		} else {
			r.spares = append(r.spares, p.buf)
		}
	}
	if p.small != nil {
		c := sizeClass(cap(p.small))
		r.small[c] = append(r.small[c], p.small[:cap(p.small)])
	}
	p.buf, p.small, p.Data, p.held = dma.Buffer{}, nil, nil, false
	r.freePkts = append(r.freePkts, p)
	return nil
}

// RxErrorKind classifies a dropped frame.
type RxErrorKind int

// Kinds of dropped frames.
const (
	RxCRC RxErrorKind = iota + 1
	RxOverrun
	RxTooLong
	RxTruncated
	RxNonOctet
	RxMACError
	RxMultiBuffer
	RxRunt
)

var rxKindNames = map[RxErrorKind]string{RxCRC: "CRC error", RxOverrun: "FIFO overrun", RxTooLong: "frame too long",
	RxTruncated: "truncated", RxNonOctet: "non-octet-aligned", RxMACError: "MAC/PHY error",
	RxMultiBuffer: "frame spans buffers", RxRunt: "runt"}

func (k RxErrorKind) String() string { return rxKindNames[k] }

// FrameError reports a received frame the driver counted and dropped.
type FrameError struct {
	Kind   RxErrorKind
	Status RxStatus
	Ext    uint32 // enhanced status/control word
	Len    int    // length the MAC reported
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("fec: dropped RX frame: %v (status %v ext %#08x len %d)", e.Kind, e.Status, e.Ext, e.Len)
}

const nClasses = 6 // copybreak buffers of 64 << k bytes

func sizeClass(n int) int {
	c := 0
	for 64<<c < n && c < nClasses-1 {
		c++
	}
	return c
}

type rxRing struct {
	mu       sync.Mutex
	desc     dma.Buffer
	r        ring
	bufs     []dma.Buffer // buffer of each descriptor
	spares   []dma.Buffer
	cur      int
	dropping bool // inside a frame that spans buffers
	// shown counts the frames from cur on that Peek or PeekRun found good
	// since they last moved: the frames DropRun may drop. A restart
	// clears it, so a drop never meets a frame nobody looked at.
	shown     int
	posted    bool // buffers handed to the device once
	closed    bool
	copybreak int
	pkts      []Packet
	freePkts  []*Packet
	small     [nClasses][][]byte
	stats     RxStats
}

func (r *rxRing) alloc(n *NIC) error {
	cnt := n.cfg.RxRing
	r.r = ring{size: n.descSize(), n: cnt}
	var err error
	if r.desc, err = n.mem.Alloc(cnt*r.r.size, n.cfg.Caps.RingAlign, dma.Coherent); err != nil {
		return fmt.Errorf("fec: RX ring: %w", err)
	}
	r.r.mem = r.desc.Bytes()
	align := max(n.cfg.Caps.RxAlign, dma.CacheLine)
	r.bufs = make([]dma.Buffer, cnt)
	for i := range r.bufs {
		if r.bufs[i], err = n.mem.Alloc(n.rxBufLen, align, dma.Cached); err != nil {
			return fmt.Errorf("fec: RX buffer %d: %w", i, err)
		}
	}
	r.spares = make([]dma.Buffer, 0, n.cfg.RxSpare+cnt)
	for i := 0; i < n.cfg.RxSpare; i++ {
		b, err := n.mem.Alloc(n.rxBufLen, align, dma.Cached)
		if err != nil {
			return fmt.Errorf("fec: RX spare buffer %d: %w", i, err)
		}
		r.spares = append(r.spares, b)
	}
	r.pkts = make([]Packet, n.cfg.Packets)
	r.freePkts = make([]*Packet, 0, len(r.pkts))
	for i := range r.pkts {
		r.pkts[i].nic = n
		r.freePkts = append(r.freePkts, &r.pkts[i])
	}
	r.copybreak = n.cfg.Copybreak
	return nil
}

func (r *rxRing) free(n *NIC) error {
	r.closed = true
	var first error
	release := func(b *dma.Buffer) {
		n.mem.SyncForCPU(b, 0, b.Len(), dma.FromDevice)
		if err := n.mem.Free(*b); err != nil && first == nil {
			first = err
		}
	}
	for i := range r.bufs {
		release(&r.bufs[i])
	}
	for i := range r.spares {
		release(&r.spares[i])
	}
	r.bufs, r.spares = nil, nil
	if err := n.mem.Free(r.desc); err != nil && first == nil {
		first = err
	}
	return first
}

// reset rebuilds the ring with every buffer empty and owned by the uDMA.
// On a restart the uDMA may have written any of them (frames not yet
// received, or cut short): each is taken back whole before it is handed
// over again.
func (r *rxRing) reset(n *NIC) {
	for i := 0; i < r.r.n; i++ {
		if r.posted {
			r.takeBack(n, i)
		} else {
			n.mem.SyncForDevice(&r.bufs[i], 0, r.bufs[i].Len(), dma.FromDevice)
		}
		r.fill(n, i)
	}
	r.posted = true
	r.cur, r.dropping, r.shown = 0, false, 0
}

// fill hands descriptor i and its buffer to the uDMA: its other words,
// a barrier, then its status word.
func (r *rxRing) fill(n *NIC, i int) {
	r.fillWords(n, i)
	n.mem.Barrier()
	r.publish(i)
}

// fillWords writes descriptor i's words other than the status word. The
// extended words are reset because the MAC (and QEMU, which never writes
// them) may leave stale verdicts there, and BDU (Table 22-35) must read 0
// until the uDMA has finished its next frame. A Barrier must follow before
// publish hands the descriptor over (Linux fec_main.c: dma_wmb before the
// status word).
func (r *rxRing) fillWords(n *NIC, i int) {
	d := r.r.at(i)
	if n.enhanced {
		storeExt(d, uint32(r.bufs[i].Addr()), RXE_INT)
	} else {
		storeWord(descWord(d, dwAddr), uint32(r.bufs[i].Addr()))
	}
}

// publish hands descriptor i to the uDMA (E, and W on the last one).
func (r *rxRing) publish(i int) {
	storeWord(descWord(r.r.at(i), dwLenStatus), r.emptyStatus(i))
}

// emptyStatus is descriptor i's status word when handed to the uDMA: E,
// and W on the last one.
func (r *rxRing) emptyStatus(i int) uint32 {
	st := RX_E
	if i == r.r.n-1 {
		st |= RX_W
	}
	return lenStatus(0, uint16(st))
}

// takeBack takes back descriptor i's whole buffer, which the uDMA may have
// written for a frame that is not handed up (with an error status the
// length is not to be trusted), and hands it over again. Otherwise those
// bytes would stay device-written, un-invalidated, until a later shorter
// frame in that buffer is handed up zero-copy and the buffer leaves the
// ring with only that frame's length invalidated. Errors and restarts are
// rare, so the whole buffer costs nothing that matters.
func (r *rxRing) takeBack(n *NIC, i int) {
	b := &r.bufs[i]
	n.mem.SyncForCPU(b, 0, b.Len(), dma.FromDevice)
	n.mem.SyncForDevice(b, 0, b.Len(), dma.FromDevice)
}

// repost returns descriptor i to the uDMA and advances.
func (r *rxRing) repost(n *NIC, i int) {
	r.fill(n, i)
	r.cur = r.r.add(i, 1)
	if r.shown > 0 {
		r.shown--
	}
	r.kick(n)
}

// kick tells the uDMA that empty descriptors wait (RDAR, 22.5.13). The
// status words just written reach memory first: a uDMA that reads a
// descriptor still not empty clears RDAR and stops receiving until the
// next write (Linux's writel of RDAR carries a write barrier, __iowmb).
func (r *rxRing) kick(n *NIC) {
	n.mem.Barrier()
	n.regs.Write32(ENETx_RDAR, DAR_ACTIVE)
}

// SetCopybreak sets the RX copybreak: frames up to b bytes are copied into a
// right-sized buffer and the ring buffer is reposted at once; larger frames
// are handed up in their ring buffer, replaced by a spare. Negative disables
// copying entirely.
func (n *NIC) SetCopybreak(b int) {
	n.rx.mu.Lock()
	n.rx.copybreak = min(b, 64<<(nClasses-1))
	n.rx.mu.Unlock()
}

// Copybreak returns the RX copybreak.
func (n *NIC) Copybreak() int {
	n.rx.mu.Lock()
	defer n.rx.mu.Unlock()
	return n.rx.copybreak
}

// Receive returns the next received frame, or (nil, nil) when none is
// waiting. A frame the driver drops (bad CRC, overrun, runt, no buffer...) is counted and reported as an error (*FrameError, or one
// wrapping ErrNoRxBuffer); call Receive again for the next frame.
func (n *NIC) Receive() (*Packet, error) {
	r := &n.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	for {
		i := r.cur
		ls := r.r.load(i, dwLenStatus)
		st := RxStatus(ls >> 16)
		if st&RX_E != 0 {
			return nil, nil
		}
		// The uDMA may clear E before it has written the enhanced words
		// (BDU, "last buffer descriptor update done", Table 22-35): until
		// BDU is set the verdicts and error bits there are stale, so the
		// frame is not complete yet. Its RXF follows the update.
		// loadExt reads the verdicts after BDU (rmb between, see peekable).
		var e0, e1 uint32
		if n.enhanced {
			var e2 uint32
			if e2, e0, e1 = loadExt(r.r.at(i)); st&RX_L != 0 && e2&BDU == 0 {
				r.stats.BDUPending++
				return nil, nil
			}
		}
		length := int(ls & 0xFFFF)
		if st&RX_L == 0 {
			// With MRBR above MAX_FL this only happens to frames the MAC
			// should have cut: drop every buffer up to L as one frame.
			if !r.dropping {
				r.dropping = true
				r.stats.count(RxMultiBuffer)
			}
			r.takeBack(n, i)
			r.repost(n, i)
			continue
		}
		if r.dropping {
			r.dropping = false
			r.takeBack(n, i)
			r.repost(n, i)
			return nil, &FrameError{Kind: RxMultiBuffer, Status: st, Ext: e0, Len: length}
		}
		var kind RxErrorKind
		switch {
		case st&RX_OV != 0: // other bits are meaningless with OV
			kind = RxOverrun
		case st&RX_TR != 0:
			kind = RxTruncated
		case st&RX_LG != 0:
			kind = RxTooLong
		case st&RX_NO != 0:
			kind = RxNonOctet
		case st&RX_CR != 0:
			kind = RxCRC
		case e0&rxeErrMask != 0:
			kind = RxMACError
		}
		off := 0
		if n.shift16 {
			off = 2
		}
		plen := length - 4 - off
		switch {
		case kind != 0:
		case plen < 14:
			kind = RxRunt
		case plen > n.cfg.MaxFrame || length > n.rxBufLen:
			kind = RxTooLong
		}
		if kind != 0 {
			r.stats.count(kind)
			r.takeBack(n, i)
			r.repost(n, i)
			return nil, &FrameError{Kind: kind, Status: st, Ext: e0, Len: length}
		}
		// buf points into r.bufs: a dma.Buffer is six words, and every
		// copy of one costs a runtime.duffcopy call on GOARM=7.
		buf := &r.bufs[i]
		synced := min(dma.AlignUp(length, dma.CacheLine), buf.Len())
		n.mem.SyncForCPU(buf, 0, synced, dma.FromDevice)
		r.stats.Invalidated += uint64(synced)
		csum, flagged := n.rxVerdict(e0, e1)
		if flagged {
			r.stats.CsumFlagged++
		}
		if len(r.freePkts) == 0 {
			return nil, r.noBuffer(n, i, synced, "packets", len(r.pkts))
		}
		p := r.freePkts[len(r.freePkts)-1]
		if plen <= r.copybreak {
			// The class holds the frame after the SHIFT16 pad, as Linux
			// copies the pad with the frame (fec_enet_copybreak copies
			// the descriptor's length, pad included, and skb_pull takes
			// it off): the IP header stays 4-byte aligned as in the
			// ring buffer, and source and destination agree mod 4
			// (memmove copies whole words then, not shifted ones).
			c := sizeClass(plen + off)
			var sb []byte
			if k := len(r.small[c]); k > 0 {
				sb = r.small[c][k-1]
				r.small[c] = r.small[c][:k-1]
			} else {
				sb = make([]byte, 64<<c)
			}
			at := 0
			if plen+off <= len(sb) { // always (plen <= MaxFrame < 2047)
				at = off
			}
			p.small = sb
			p.Data = sb[at : at+copy(sb[at:], buf.Bytes()[off:off+plen])]
			n.mem.SyncForDevice(buf, 0, synced, dma.FromDevice)
			r.stats.Copybreak++
			r.stats.Copied += uint64(plen)
		} else {
			if len(r.spares) == 0 {
				return nil, r.noBuffer(n, i, synced, "spare buffers", n.cfg.RxSpare)
			}
			k := len(r.spares) - 1
			n.mem.SyncForDevice(&r.spares[k], 0, r.spares[k].Len(), dma.FromDevice)
			p.buf = *buf
			*buf = r.spares[k]
			r.spares[k] = dma.Buffer{}
			r.spares = r.spares[:k]
			p.Data = p.buf.Bytes()[off : off+plen]
			r.stats.ZeroCopy++
		}
		r.freePkts = r.freePkts[:len(r.freePkts)-1]
		p.Csum, p.held = csum, true
		r.stats.Frames++
		r.stats.Bytes += uint64(plen)
		r.repost(n, i)
		return p, nil
	}
}

// noBuffer gives descriptor i's buffer back when there is nothing to hand
// its frame up in, counts, and says why.
// synced is how many leading bytes of its buffer were synced for the CPU.
func (r *rxRing) noBuffer(n *NIC, i int, synced int, what string, held int) error {
	r.stats.NoBuffer++
	n.mem.SyncForDevice(&r.bufs[i], 0, synced, dma.FromDevice)
	r.repost(n, i)
	return fmt.Errorf("%w: all %d %s held by the caller", ErrNoRxBuffer, held, what)
}

// rxVerdict decodes the enhanced descriptor's checksum results (Table 22-35,
// IMX6ULLRM). The MAC writes a non-zero header length (bits 31:27 of the
// word at +12) only for a frame it parsed as IP; the protocol sits in bits
// 23:16. ICE and PCR mean "not verified": ICE is set for a non-IP frame and
// for an IP datagram with under 3 bytes of payload as well as for a bad
// header checksum, PCR for a protocol the MAC cannot check as well as for a
// bad checksum. A flagged frame is therefore never dropped here: it is
// delivered with nothing claimed verified and the stack checks it (Linux's
// fec_enet_rx_queue likewise only withholds CHECKSUM_UNNECESSARY). flagged
// reports an IP frame with ICE or PCR set, for the counters. (QEMU never
// writes these fields, and the driver clears them on refill, so under QEMU
// no checksum is claimed verified.)
func (n *NIC) rxVerdict(e0, e1 uint32) (c CsumInfo, flagged bool) {
	if !n.CsumOffload() || e1>>RXE1_HLEN_SHIFT == 0 {
		return c, false
	}
	bad := e0&(RXE_ICE|RXE_PCR) != 0
	if e0&RXE_IPV6 == 0 {
		c.IPv4 = e0&RXE_ICE == 0
	}
	proto := e1 >> RXE1_PROTO_SHIFT & 0xFF
	if (proto == pkt.ProtoTCP || proto == pkt.ProtoUDP) && e0&RXE_FRAG == 0 && !bad {
		c.L4 = true
	}
	return c, bad
}
