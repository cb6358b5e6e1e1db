package connectx

import (
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/netstack"
)

func (n *NIC) allocRx() error {
	var err error
	size := n.cfg.RxBufSize
	if n.rq.pool, err = n.mem.Alloc(size*n.cfg.RxRing, PageSize, dma.Cached); err != nil {
		return fmt.Errorf("connectx: receive buffers: %w", err)
	}
	pool := n.rq.pool
	n.pushMem("receive buffers", func() error {
		n.mem.SyncForCPU(&pool, 0, pool.Len(), dma.FromDevice)
		return n.mem.Free(pool)
	})
	n.rq.slotBuf = make([]uint32, n.cfg.RxRing)
	for i := 0; i < n.cfg.RxRing; i++ {
		n.rq.bufs = append(n.rq.bufs, pool.Slice(i*size, size))
		n.postRx(uint32(i))
	}
	n.mem.Barrier()
	storeBE32(n.dbr.Bytes(), dbrRQ, n.rq.pc&0xFFFF)
	return nil
}

// RxAlign is how far into its buffer each receive data segment starts, so
// a frame's IP header, 14 bytes in, is 4-byte aligned as the ENET's
// SHIFT16 leaves it: the gVisor endpoint copies each frame 2 bytes into
// its own buffer, and with source and destination equally aligned mod 4
// 32-bit ARM's memmove and the one-pass copy and checksum take their word
// paths. The data segment's byte_count is the buffer less RxAlign, so the
// card, which writes at most byte_count bytes from the address (more is a
// length error CQE), never writes past the buffer.
//
// An RQ data segment is a byte count, a key and a 64-bit address
// (qp.h struct mlx5_wqe_data_seg; the PRM's receive data segment); no
// alignment of the address is asked anywhere found here, and both mlx5
// Ethernet drivers post unaligned ones. Linux mlx5e adds the RQ headroom
// to the buffer address (en_rx.c mlx5e_alloc_rx_wqe: addr + frag->offset
// + headroom), a headroom that starts at NET_IP_ALIGN (en/params.c
// mlx5e_get_linear_rq_headroom: NET_IP_ALIGN + MLX5_RX_HEADROOM, which is
// NET_SKB_PAD; NET_IP_ALIGN is 2 unless the architecture overrides it,
// and 32-bit ARM does not), and gives byte_count the fragment size after
// it (en_main.c mlx5e_alloc_rq); FreeBSD's mlx5en trims each receive mbuf
// by MLX5E_NET_IP_ALIGN (2) before loading it into the data segment
// (mlx5_en_rx.c mlx5e_alloc_rx_wqe), on every architecture. Both also set
// MLX5_HW_START_PADDING (bit 31 of byte_count); this driver does not.
const RxAlign = 2

// postRx writes buffer id into the next RQ slot (the caller publishes the
// doorbell record). The invalidate covers the whole buffer: the cache
// lines holding the byte_count bytes the card may write from RxAlign on.
func (n *NIC) postRx(id uint32) {
	b := &n.rq.bufs[id]
	n.mem.SyncForDevice(b, 0, b.Len(), dma.FromDevice)
	i := n.rq.pc & (n.rq.size - 1)
	d := DataSeg{ByteCount: uint32(b.Len() - RxAlign), LKey: n.obj.rlkey, Addr: uint64(b.Addr()) + RxAlign}
	d.Encode(n.rq.buf.Bytes()[i*DSSize:])
	n.rq.slotBuf[i] = id
	n.rq.pc++
}

// Frame is a received frame, valid until Release.
type Frame struct {
	n        *NIC
	id       uint32
	data     []byte
	ip4, l4  bool
	csum     uint16
	released bool
}

// CheckSum returns the card's raw ones'-complement sum of the frame from
// the IP header to the end of the IP datagram (CQE check_sum, what Linux
// uses for CHECKSUM_COMPLETE), folded and not complemented.
func (f *Frame) CheckSum() uint16 { return f.csum }

// Bytes returns the frame from the destination MAC, without FCS.
func (f *Frame) Bytes() []byte { return f.data }

// Verified reports the card's checksum verdicts (CQE L3_OK, L4_OK).
func (f *Frame) Verified() (ipv4Header, transport bool) { return f.ip4, f.l4 }

// Release hands the buffer back to the card.
func (f *Frame) Release() error {
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.released {
		return errors.New("connectx: frame released twice")
	}
	f.released = true
	if n.closed {
		return nil
	}
	if n.rq.err {
		n.rq.free = append(n.rq.free, f.id) // posted when the RQ is back
		return nil
	}
	n.postRx(f.id)
	n.mem.Barrier()
	storeBE32(n.dbr.Bytes(), dbrRQ, n.rq.pc&0xFFFF)
	return nil
}

// Receive returns the next frame, (nil, nil) when none waits, or an error
// for a frame the card reported bad (counted; its buffer is reposted).
// After a receive error with a syndrome Linux recovers from (needsRecovery)
// the driver asks the card for the RQ's state; if it is in ERR, the card
// returns every posted buffer with a flush CQE (taken here
// without a report) and, once all are back, the RQ is reset and refilled
// (Linux en/reporter_rx.c mlx5e_rx_reporter_err_rq_cqe_recover).
func (n *NIC) Receive() (netstack.Frame, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, nil
	}
	q := &n.rxcq
	for {
		e := q.next()
		if e == nil {
			return nil, nil
		}
		n.mem.Barrier()
		c, err := DecodeCQE(e)
		q.cc++
		n.mem.Barrier()
		storeBE32(n.dbr.Bytes(), dbrRxCQ, q.cc&0xFFFFFF)
		n.rq.cc++
		id := n.rq.slotBuf[uint32(c.WQECounter)&(n.rq.size-1)]
		b := &n.rq.bufs[id]
		if err == nil && c.Opcode == CQEOpRespSend && int(c.ByteCnt) <= b.Len()-RxAlign && !n.rq.err {
			n.mem.SyncForCPU(b, 0, b.Len(), dma.FromDevice)
			n.stats.RxPackets++
			n.stats.RxBytes += uint64(c.ByteCnt)
			l3ok, l4ok := c.HdsIPExt&CQEL3OK != 0, c.HdsIPExt&CQEL4OK != 0
			if l3ok && l4ok {
				n.stats.RxCsumOK++
			}
			return &Frame{n: n, id: id, data: b.Bytes()[RxAlign : RxAlign+c.ByteCnt], ip4: l3ok && c.L3Type() == CQEL3TypeIPv4, l4: l3ok && l4ok,
				csum: c.CheckSum}, nil
		}
		n.mem.SyncForCPU(b, 0, b.Len(), dma.FromDevice)
		queueErr := false
		if err == nil && c.Opcode == CQEOpRespErr && !n.rq.err && needsRecovery(c.Syndrome) {
			// Linux asks the card before it resets the RQ and resets it
			// only from ERR (en/reporter_rx.c
			// mlx5e_rx_reporter_err_rq_cqe_recover, mlx5e_query_rq_state).
			st, qerr := n.queryRQState()
			if qerr != nil {
				n.broken = fmt.Errorf("connectx: receive queue state after syndrome %#x: %w", c.Syndrome, qerr)
			}
			queueErr = qerr == nil && st == StateERR
		}
		if queueErr || n.rq.err {
			// The RQ is in ERR: this buffer waits for the reset.
			n.rq.free = append(n.rq.free, id)
			first := !n.rq.err
			if first {
				n.rq.errAt = n.cfg.Now()
			}
			n.rq.err = true
			if c.Syndrome == SyndromeFlush {
				n.stats.RxFlushed++
			} else {
				n.stats.RxErrors++
			}
			n.recoverRQ()
			if first {
				return nil, fmt.Errorf("%w: CQE opcode %#x syndrome %#x: receive queue in error, recovering", ErrRxError, c.Opcode, c.Syndrome)
			}
			continue
		}
		n.stats.RxErrors++
		n.stats.RxErrNoRecovery++
		n.postRx(id)
		n.mem.Barrier()
		storeBE32(n.dbr.Bytes(), dbrRQ, n.rq.pc&0xFFFF)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRxError, err)
		}
		return nil, fmt.Errorf("%w: CQE opcode %#x syndrome %#x, %d bytes", ErrRxError, c.Opcode, c.Syndrome, c.ByteCnt)
	}
}

// needsRecovery reports whether a receive error with syndrome syn may have
// put the RQ in ERR: LOCAL_QP_OP_ERR, LOCAL_PROT_ERR, WR_FLUSH_ERR, as
// Linux's en/health.h cqe_syndrome_needs_recover (en_rx.c trigger_report
// recovers after no other).
func needsRecovery(syn uint8) bool {
	return syn == SyndromeQPOp || syn == SyndromeProt || syn == SyndromeFlush
}

// queryRQState asks the card for the RQ's state (QUERY_RQ; mlx5_ifc.h
// query_rq_out: rq_context at 0x20, rqc state bits 23..20 of its first
// dword; Linux gives the whole query_rq_out, 0x110 bytes).
func (n *NIC) queryRQState() (uint32, error) {
	in := newIn(OpQueryRQ, 0, 0x10)
	put32(in, 0x08, n.obj.rq)
	out, err := n.exec(in, 0x110)
	if err != nil {
		return 0, fmt.Errorf("connectx: QUERY_RQ %#x: %w", n.obj.rq, err)
	}
	return Field{0x20, 23, 20}.Get(out), nil
}

// recoverRQ returns an RQ in ERR to service once the card has given back
// every posted WQE (cc == pc): MODIFY_RQ ERR->RST, counters to 0,
// RST->RDY, then the buffers it holds are posted again (Linux
// mlx5e_rx_reporter_err_rq_cqe_recover: mlx5e_flush_rq, then
// mlx5e_activate_rq). Buffers lent to the stack are posted when released.
func (n *NIC) recoverRQ() {
	rq := &n.rq
	if rq.cc != rq.pc {
		return
	}
	rq.err = false
	n.stats.RQRecoveries++
	if err := n.modifyState(OpModifyRQ, n.obj.rq, StateERR, StateRST); err != nil {
		n.broken = fmt.Errorf("connectx: receive queue recovery: %w", err)
		return
	}
	rq.pc, rq.cc = 0, 0
	storeBE32(n.dbr.Bytes(), dbrRQ, 0)
	if err := n.modifyState(OpModifyRQ, n.obj.rq, StateRST, StateRDY); err != nil {
		n.broken = fmt.Errorf("connectx: receive queue recovery: %w", err)
		return
	}
	for _, id := range rq.free {
		n.postRx(id)
	}
	rq.free = rq.free[:0]
	n.mem.Barrier()
	storeBE32(n.dbr.Bytes(), dbrRQ, rq.pc&0xFFFF)
}
