package connectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// Doorbell record layout in n.dbr: each record in its own 64-byte line.
const (
	dbrSQ   = 0  // dword 1 (MLX5_SND_DBR) = SQ producer counter
	dbrRQ   = 64 // dword 0 (MLX5_RCV_DBR) = RQ producer counter
	dbrTxCQ = 128
	dbrRxCQ = 192
)

// sendQueue is the SQ: a ring of 64-byte WQEBBs.
type sendQueue struct {
	buf    dma.Buffer
	size   uint32
	pc, cc uint32 // producer and consumer counters, in WQEBBs
	slots  []txSlot
	scr    [256]byte // inline header scratch
	data   [][]byte
	// err: an error CQE was seen; the SQ is in ERR. New sends are
	// refused until every WQE came back with its own CQE (flush error
	// CQEs after the error one), then the SQ is reset (errAt: when).
	err   bool
	errAt time.Time
	// maxDS is the largest WQE the card takes, in 16-byte units: the
	// general caps' max_wqe_sz_sq in WQEBBs, at most 16, times 4, at most
	// 63 (ds_cnt is 6 bits).
	maxDS int
}

// txSlot is the software state of the WQE starting at one WQEBB.
type txSlot struct {
	n      uint32 // WQEBBs
	cookie any
	maps   []dma.Buffer
	live   bool // a real send (not a NOP pad)
	// bounce holds the fragments a WQE could not carry as data segments,
	// copied into one buffer the card reads while the send is queued; a
	// small one is kept for the slot's next gather.
	bounce []byte
}

// keepBounce is the largest gather buffer a slot keeps for reuse (a
// frame of the default MTU fits): bigger ones, made for LSO packets in
// many views, are left to the garbage collector once the send completes.
const keepBounce = 2048

// reuse returns what of s a later WQE in the same slot keeps: its maps
// slice and a small bounce buffer.
func (s *txSlot) reuse() txSlot {
	t := txSlot{maps: s.maps[:0]}
	if cap(s.bounce) <= keepBounce {
		t.bounce = s.bounce[:0]
	}
	return t
}

// recvQueue is the RQ: a ring of one-data-segment WQEs.
type recvQueue struct {
	buf     dma.Buffer
	size    uint32
	pc      uint32
	pool    dma.Buffer   // all receive buffers, one allocation
	bufs    []dma.Buffer // slices of pool
	slotBuf []uint32     // which buffer each WQE slot holds
	// cc counts the CQEs taken for posted WQEs. err: a receive error
	// other than a length error put the RQ in ERR; the buffers the card
	// returns meanwhile (flush CQEs) and those the stack releases wait in
	// free until every posted WQE came back (cc == pc), then the RQ is
	// reset and they are posted again (errAt: when the error came; Poll
	// fails the card past RQFlushTimeout).
	cc    uint32
	err   bool
	errAt time.Time
	free  []uint32
}

// maxDS is the largest WQE in 16-byte units: ds_cnt is 6 bits
// (MLX5_WQE_CTRL_DS_MASK 0x3f), although 16 WQEBBs would hold 64.
const maxDS = 63

// maxInlineHdr is the longest header this driver copies inline for a send
// whose headers the vport's inline mode asks for: Ethernet, two VLAN tags,
// a 60-byte IPv4 header and a 60-byte TCP header (14+8+60+60).
const maxInlineHdr = 14 + 8 + 60 + 60

// dataSegs returns the data segments a WQE of at most maxDS units carries
// in place beside an inline header of ihs bytes: the control segment, the
// eth segment with its inline bytes (InlineDS; 10 units for 142 bytes),
// the rest data segments.
func dataSegs(maxDS, ihs int) int { return maxDS - 1 - InlineDS(ihs) }

// minInline returns the header bytes the card needs inline for frame f of
// total bytes (vport min_wqe_inline_mode; Linux mlx5e_calc_min_inline).
func (n *NIC) minInline(head []byte, total int) int {
	need := MinInlineL2
	if n.caps.WQEInlineMode == 1 && n.caps.MinInlineMode >= 2 {
		h, err := pkt.Parse(head)
		switch {
		case err == nil:
			need = max(need, h.L4)
			if n.caps.MinInlineMode >= 3 && h.Proto == pkt.ProtoTCP {
				if len(head) < h.L4+13 {
					return -1 // the TCP header's length is past the scratch
				}
				need = max(need, h.L4+int(head[h.L4+12]>>4)*4)
			} else if n.caps.MinInlineMode >= 3 && h.Proto == pkt.ProtoUDP {
				need = max(need, h.L4+8)
			}
		case errors.Is(err, pkt.ErrTruncated) && len(head) < total:
			return -1 // headers run past the scratch: their end is unknown
		}
	}
	return min(need, total)
}

// Transmit queues one frame given as fragments; csum asks the card for the
// IPv4 header and TCP/UDP checksums. Fragments are sent in place after an
// inline copy of the first header bytes; a frame in more fragments than
// one WQE has data segments for is copied into a bounce buffer (any number
// of fragments is taken, as netstack.Device asks).
func (n *NIC) Transmit(frags [][]byte, csum bool, cookie any) error {
	total := 0
	for _, f := range frags {
		total += len(f)
	}
	var flags uint8
	if csum {
		flags = EthL3Csum | EthL4Csum
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	if total < 14 || total > n.cfg.MTU+18 {
		n.stats.TxBadPacket++
		n.mu.Unlock()
		return fmt.Errorf("%w: frame of %d bytes", ErrBadPacket, total)
	}
	// Gather the inline part into scratch, the rest as views.
	head := n.sq.scr[:0]
	rest := n.sq.data[:0]
	for _, f := range frags {
		if k := min(len(f), len(n.sq.scr)-len(head)); k > 0 {
			head = append(head, f[:k]...)
		}
	}
	ihs := n.minInline(head, total)
	if ihs > len(head) || ihs < 0 {
		// The headers the inline mode needs run past the scratch (a
		// chain of IPv6 extension headers): refused, never sent with
		// bytes the frame does not have (a review found stale scratch
		// bytes inlined from byte 200 on).
		n.stats.TxBadPacket++
		n.mu.Unlock()
		return fmt.Errorf("%w: headers past the %d-byte inline scratch", ErrBadPacket, len(n.sq.scr))
	}
	skip := ihs
	for _, f := range frags {
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		rest = append(rest, f[skip:])
		skip = 0
	}
	n.sq.data = rest
	done, err := n.post(OpcodeSend, flags, 0, head[:ihs], rest, cookie)
	n.mu.Unlock()
	n.complete(done)
	return err
}

// TransmitGSO queues one TCP packet for the card to segment (LSO): the
// headers inline, the MSS in the eth segment, the payload gathered in
// place. A packet that fits one segment goes as a plain send with checksum
// offload. The transport checksum field keeps what the stack left there
// (the pseudo-header sum, as Linux hands the card under CHECKSUM_PARTIAL);
// the card computes every segment's checksums.
func (n *NIC) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	size := len(hdr)
	for _, p := range payload {
		size += len(p)
	}
	bad := func(format string, a ...any) error {
		n.stats.TxBadPacket++
		n.mu.Unlock()
		return fmt.Errorf("%w: "+format, append([]any{ErrBadPacket}, a...)...)
	}
	if o.Type != tso.TCP {
		// The LSO engine segments TCP only; it never IP-fragments.
		return bad("segmentation type %v", o.Type)
	}
	h, err := pkt.Parse(hdr)
	if err != nil || h.Proto != pkt.ProtoTCP || len(hdr) < h.L4+20 || len(hdr) != h.L4+int(hdr[h.L4+12]>>4)*4 {
		return bad("headers are not exactly Ethernet, IP and TCP (%d bytes)", len(hdr))
	}
	if len(hdr) > len(n.sq.scr) {
		return bad("headers of %d bytes", len(hdr))
	}
	if o.MSS < tso.MinTCPMSS {
		return bad("MSS %d", o.MSS)
	}
	if len(hdr)+o.MSS > n.cfg.MTU+18 {
		// Each segment the card cuts is headers plus MSS: past the port's
		// frame it fails the WQE, the SQ goes to error and every queued
		// send is flushed (a review found it), so it is refused here, as
		// Transmit refuses an oversized frame.
		return bad("segments of %d bytes (headers %d + MSS %d) exceed the %d-byte frame", len(hdr)+o.MSS, len(hdr), o.MSS, n.cfg.MTU+18)
	}
	head := append(n.sq.scr[:0], hdr...)
	data := n.sq.data[:0]
	for _, p := range payload {
		if len(p) > 0 {
			data = append(data, p)
		}
	}
	n.sq.data = data
	op, mss := uint8(OpcodeLSO), uint16(o.MSS)
	if size-len(hdr) <= o.MSS {
		op, mss = OpcodeSend, 0
		if size > n.cfg.MTU+18 {
			return bad("frame of %d bytes", size)
		}
	} else if size > n.caps.MaxLSO {
		return bad("LSO message of %d bytes exceeds %d", size, n.caps.MaxLSO)
	}
	done, err := n.post(op, EthL3Csum|EthL4Csum, mss, head, data, cookie)
	if err == nil && op == OpcodeLSO {
		n.stats.TxLSO++
	}
	n.mu.Unlock()
	n.complete(done)
	return err
}

// post builds one WQE (after NOP padding if it would cross the ring end),
// maps its data and rings the doorbell. Called with n.mu held; it returns
// completions reclaimed on the way, to be delivered without the lock.
func (n *NIC) post(opcode, flags uint8, mss uint16, inline []byte, data [][]byte, cookie any) ([]completion, error) {
	if n.failed != nil {
		return nil, n.failed
	}
	if n.broken != nil {
		return nil, n.broken
	}
	if n.sq.err {
		// The card still owns WQEs of the failed SQ: nothing new is
		// queued until it returned them all (Linux stops the queue,
		// mlx5e_tx_disable_queue). Full: the send succeeds later.
		done := n.pollTx(nil)
		if n.sq.err {
			n.stats.TxRingFull++
			return done, ErrRecovering
		}
		if n.broken != nil || n.failed != nil {
			return done, errors.Join(n.broken, n.failed)
		}
		return n.postAfter(done, opcode, flags, mss, inline, data, cookie)
	}
	return n.postAfter(nil, opcode, flags, mss, inline, data, cookie)
}

// postAfter is post once the SQ is in service; done holds completions
// already reclaimed.
func (n *NIC) postAfter(done []completion, opcode, flags uint8, mss uint16, inline []byte, data [][]byte, cookie any) ([]completion, error) {
	// A frame in more fragments than the WQE has data segments for is
	// gathered into one bounce buffer (the netstack.Device contract: any
	// number of fragments). One WQE is the most the card takes for one
	// packet: an LSO send cannot be split across WQEs without rewriting
	// its headers, and a plain send split across WQEs would be two frames.
	gather := len(data) > dataSegs(n.sq.maxDS, len(inline))
	segs := len(data)
	if gather {
		segs = 1
	}
	ds := 1 + InlineDS(len(inline)) + segs
	if ds > n.sq.maxDS {
		n.stats.TxBadPacket++
		return done, fmt.Errorf("%w: %d inline bytes and %d data segments make %d DS, the card takes %d", ErrTooManySegs, len(inline), segs, ds, n.sq.maxDS)
	}
	nbb := uint32((ds + 3) / 4)
	sq := &n.sq
	need := func() uint32 {
		pad := uint32(0)
		if at := sq.pc & (sq.size - 1); at+nbb > sq.size {
			pad = sq.size - at
		}
		return pad + nbb
	}
	if sq.size-(sq.pc-sq.cc) < need() {
		done = n.pollTx(done)
	}
	if sq.size-(sq.pc-sq.cc) < need() {
		n.stats.TxRingFull++
		return done, ErrRingFull
	}
	ring := sq.buf.Bytes()
	for at := sq.pc & (sq.size - 1); at+nbb > sq.size; at = sq.pc & (sq.size - 1) {
		w := ring[at*WQEBB : (at+1)*WQEBB]
		clear(w)
		c := CtrlSeg{WQEIndex: uint16(sq.pc), Opcode: OpcodeNOP, SQN: n.obj.sq, DS: 1}
		c.Encode(w)
		sq.slots[at] = sq.slots[at].reuse()
		sq.slots[at].n = 1
		sq.pc++
	}
	at := sq.pc & (sq.size - 1)
	maps := sq.slots[at].maps[:0] // reuse the slot's slice: no allocation per send
	bounce := sq.slots[at].bounce[:0]
	if gather {
		total := 0
		for _, d := range data {
			total += len(d)
		}
		if cap(bounce) < total {
			bounce = make([]byte, 0, total)
		}
		for _, d := range data {
			bounce = append(bounce, d...)
		}
		sq.data = append(sq.data[:0], bounce)
		data = sq.data
		n.stats.TxGathered++
	}
	for _, d := range data {
		// Mapped in place in the slot's slice: no dma.Buffer copies.
		maps = append(maps, dma.Buffer{})
		if err := n.mem.Map(&maps[len(maps)-1], d, dma.ToDevice); err != nil {
			maps = maps[:len(maps)-1]
			for k := range maps {
				_ = n.mem.Unmap(&maps[k], dma.ToDevice)
			}
			return done, fmt.Errorf("connectx: map %d bytes: %w", len(d), err)
		}
	}
	w := ring[at*WQEBB : (at+nbb)*WQEBB]
	clear(w)
	c := CtrlSeg{WQEIndex: uint16(sq.pc), Opcode: opcode, SQN: n.obj.sq, DS: uint8(ds), FmCeSe: CtrlCQUpdate}
	c.Encode(w)
	e := EthSeg{CsFlags: flags, MSS: mss, Inline: inline}
	off := DSSize + e.Encode(w[DSSize:])
	for _, m := range maps {
		d := DataSeg{ByteCount: uint32(m.Len()), LKey: n.obj.rlkey, Addr: uint64(m.Addr())}
		d.Encode(w[off:])
		off += DSSize
	}
	sq.slots[at] = txSlot{n: nbb, cookie: cookie, maps: maps, live: true, bounce: bounce}
	sq.pc += nbb
	n.stats.TxPackets++
	n.stats.TxBytes += uint64(len(inline))
	for _, m := range maps {
		n.stats.TxBytes += uint64(m.Len())
	}
	n.ringSQ(w[:8])
	return done, nil
}

// ringSQ publishes the producer counter in the doorbell record, then writes
// the WQE's first 8 bytes to the UAR as they sit in memory: a 64-bit
// doorbell done as two 32-bit stores, lower address first, nothing else
// touching this UAR page between them.
func (n *NIC) ringSQ(ctrl []byte) {
	n.mem.Barrier() // WQE visible before the record (dma_wmb)
	storeBE32(n.dbr.Bytes(), dbrSQ+4, n.sq.pc&0xFFFF)
	n.mem.Barrier() // record visible before the MMIO doorbell (wmb)
	uar := n.obj.uar * UARPageSize
	n.cfg.BAR0.Write32(uar+UARSendDoorbell, binary.LittleEndian.Uint32(ctrl[0:4]))
	n.cfg.BAR0.Write32(uar+UARSendDoorbell+4, binary.LittleEndian.Uint32(ctrl[4:8]))
}

// retire completes WQEs up to and including the one whose index is
// counter; err is given to that last one's cookie (earlier ones, completed
// without their own CQE, succeeded). With all set, every queued WQE is
// completed with err.
func (n *NIC) retire(done []completion, counter uint16, err error, all bool) []completion {
	sq := &n.sq
	for sq.cc != sq.pc {
		s := &sq.slots[sq.cc&(sq.size-1)]
		last := !all && uint16(sq.cc) == counter
		if s.live {
			for k := range s.maps {
				_ = n.mem.Unmap(&s.maps[k], dma.ToDevice)
			}
			var e error
			if last || all {
				e = err
			}
			if e != nil {
				n.stats.TxErrors++
			}
			done = append(done, completion{s.cookie, e})
		}
		sq.cc += s.n
		*s = s.reuse()
		if last {
			break
		}
	}
	return done
}

// pollTx handles the TX CQ. Every CQE retires the WQEs up to the one it
// names: a good one completes them, an error CQE (the SQ moved to ERR)
// and the flush error CQEs that follow it (syndrome 0x05, one per WQE the
// card still held, as flush_in_error_en asks) complete theirs with an
// error.
func (n *NIC) pollTx(done []completion) []completion {
	q := &n.txcq
	seen := false
	for e := q.next(); e != nil; e = q.next() {
		n.mem.Barrier() // dma_rmb: the rest of the CQE after op_own
		c, err := DecodeCQE(e)
		q.cc++
		seen = true
		switch {
		case err != nil:
			n.stats.TxErrors++
		case c.Opcode == CQEOpReq:
			done = n.retire(done, c.WQECounter, nil, false)
		case c.Opcode == CQEOpReqErr:
			if !n.sq.err {
				n.sq.err, n.sq.errAt = true, n.cfg.Now()
			}
			cause := ErrSendFailed
			if c.Syndrome == SyndromeFlush {
				cause = ErrFlushed
			}
			done = n.retire(done, c.WQECounter, fmt.Errorf("%w: syndrome %#x vendor %#x", cause, c.Syndrome, c.VendorSynd), false)
		default:
			n.stats.TxErrors++
		}
	}
	if seen {
		n.mem.Barrier()
		storeBE32(n.dbr.Bytes(), dbrTxCQ, q.cc&0xFFFFFF)
	}
	if n.sq.err {
		done = n.recoverSQ(done)
	}
	return done
}

// recoverSQ returns a failed SQ to service once the card has given back
// every WQE, as Linux's mlx5e_tx_reporter_err_cqe_recover does: wait
// until cc == pc (mlx5e_wait_for_sq_flush), MODIFY_SQ ERR->RST->RDY
// (mlx5e_health_sq_to_ready), counters back to 0
// (mlx5e_reset_txqsq_cc_pc). Until then the WQEs, their buffers and their
// ring slots are the card's. When the flush CQEs do not come within
// SQFlushTimeout (Linux gives up after 2 s and leaves the queue stopped)
// the card is failed as Fail does: Bus Master Enable off first, then the
// sends still queued complete with an error.
func (n *NIC) recoverSQ(done []completion) []completion {
	sq := &n.sq
	if sq.cc != sq.pc {
		if n.cfg.Now().Sub(sq.errAt) > n.cfg.SQFlushTimeout {
			done = append(done, n.failLocked(fmt.Errorf("SQ %#x flush timed out after %v (cc %d, pc %d)", n.obj.sq, n.cfg.SQFlushTimeout, sq.cc, sq.pc))...)
		}
		return done
	}
	sq.err = false
	n.stats.SQRecoveries++
	if err := n.modifyState(OpModifySQ, n.obj.sq, StateERR, StateRST); err != nil {
		n.broken = fmt.Errorf("connectx: send queue recovery: %w", err)
		return done
	}
	sq.pc, sq.cc = 0, 0
	storeBE32(n.dbr.Bytes(), dbrSQ+4, 0)
	if err := n.modifyState(OpModifySQ, n.obj.sq, StateRST, StateRDY); err != nil {
		n.broken = fmt.Errorf("connectx: send queue recovery: %w", err)
	}
	return done
}

func (n *NIC) complete(done []completion) {
	if n.txDone == nil {
		return
	}
	for _, c := range done {
		n.txDone(c.cookie, c.err)
	}
}

// Poll services the card: events (page requests, port changes, CQ
// errors), TX completions, and signals RxReady when a frame waits.
func (n *NIC) Poll() {
	n.mu.Lock()
	if n.closed || n.failed != nil {
		n.mu.Unlock()
		return
	}
	n.pollEQ()
	done := n.pollTx(nil)
	if rq := &n.rq; rq.err && n.failed == nil && n.cfg.Now().Sub(rq.errAt) > n.cfg.RQFlushTimeout {
		// The card still holds posted buffers: they stay its own, so
		// the RQ is not reset; the card is failed (BME off) instead.
		done = append(done, n.failLocked(fmt.Errorf("RQ %#x flush timed out after %v (cc %d, pc %d)", n.obj.rq, n.cfg.RQFlushTimeout, rq.cc, rq.pc))...)
	}
	ready := n.rxcq.next() != nil
	n.mu.Unlock()
	n.complete(done)
	if ready {
		select {
		case n.rxRdy <- struct{}{}:
		default:
		}
	}
}

// pollEQ handles events and acknowledges them through the EQ doorbell.
func (n *NIC) pollEQ() {
	q := &n.eq
	seen := false
	for e := q.next(); e != nil; e = q.next() {
		n.mem.Barrier()
		ev, _ := DecodeEQE(e)
		q.cc++
		seen = true
		n.stats.Events++
		switch ev.Type {
		case EventPageRequest:
			n.stats.PageRequests++
			fn, num := ev.PageRequest()
			if num > 0 {
				if err := n.givePages(int(num)); err != nil {
					if !errors.Is(err, ErrNoPages) {
						n.stats.PageRefused++ // ErrNoPages is counted by givePages
					}
					n.cantGive(fn)
				}
			} else if num < 0 {
				_, _ = n.takePages(int(-num))
			}
		case EventPortChange:
			n.stats.PortChanges++
			n.link = ev.SubType == 4
		case EventCQError:
			n.stats.CQErrors++
			cqn, syn := ev.CQN()
			n.broken = fmt.Errorf("%w: CQ %#x error, syndrome %d (1 overrun, 2 access violation)", ErrCQError, cqn, syn)
		}
	}
	if seen {
		n.bar.write(n.obj.uar*UARPageSize+UAREQDoorbell, n.obj.eqn<<24|q.cc&0xFFFFFF)
	}
}

var _ netstack.Device = (*NIC)(nil)
