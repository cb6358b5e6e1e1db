package connectxtest

import (
	"encoding/binary"
	"fmt"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkt"
)

// Audit (Linux include/linux/mlx5/qp.h, device.h, cq.h, en_tx.c, en_rx.c,
// en/txrx.h, wq.h): WQEBB 64 bytes, DS 16 bytes, ds_cnt 6 bits
// (MLX5_WQE_CTRL_DS_MASK), at most MLX5_SEND_WQE_MAX_WQEBBS = 16, NOP
// padding so no WQE wraps (mlx5e_sq_fetch_wqe / mlx5e_fill_sq_frag_edge);
// CE = MLX5_WQE_CTRL_CQ_UPDATE (2 << 2) asks for a CQE; inline header
// start 2 bytes at eth+0x0E (INL_HDR_START_SZ), ds_cnt += DIV_ROUND_UP(ihs
// - 2, 16); opcodes MLX5_OPCODE_NOP 0, SEND 0x0A, LSO 0x0E; cs_flags
// MLX5_ETH_WQE_L3_CSUM 0x40, L4_CSUM 0x80; min inline per
// mlx5e_calc_min_inline (L2 18 bytes = ETH_HLEN + VLAN_HLEN, IP up to the
// transport header, TCP_UDP through it); data segment byte_count, lkey,
// addr (struct mlx5_wqe_data_seg), MLX5_INVALID_LKEY 0x100 ends an RX
// list. CQE64 (struct mlx5_cqe64 / mlx5_err_cqe): check_sum 0x14,
// hds_ip_ext 0x1C (CQE_L2_OK 1, L3_OK 2, L4_OK 4), l4_l3_hdr_type 0x1D
// (L4 7:4: 1 TCP, 2 UDP, 3 TCP ACK no data, 4 TCP ACK and data; L3 3:2:
// 1 IPv6, 2 IPv4), byte_cnt 0x2C, sop_drop_qpn 0x38, wqe_counter 0x3C,
// op_own 0x3F (opcode 7:4: REQ 0, RESP_SEND 2, REQ_ERR 0xD, RESP_ERR
// 0xE; owner bit 0), error syndrome 0x37 (LOCAL_LENGTH_ERR 1,
// LOCAL_QP_OP_ERR 2, LOCAL_PROT_ERR 4). The CQE checksum covers the IP
// header to the end of the IP datagram: no VLAN, no Ethernet padding
// (en_rx.c mlx5e_handle_csum adds the padding back with
// mlx5e_skb_padding_csum unless the cqe_checksum_full cap is set).

// Send WQE (qp.h): control segment at 0 (opmod|wqe_index|opcode, sqn|ds,
// signature, fm_ce_se at byte 11), eth segment at 0x10 (cs_flags 0x14, mss
// 0x16, inline_hdr.sz 0x1C, inline bytes from 0x1E), data segments
// (byte_count, lkey, addr) after the inline header, 16-byte aligned.
const (
	opNOP, opSend, opLSO = 0x00, 0x0A, 0x0E
	csL3, csL4           = 0x40, 0x80
	synLength            = 0x01
	synQPOp              = 0x02
	synProt              = 0x04
)

// wqeError is a WQE the card refuses.
type wqeError struct {
	syn uint8
	msg string
}

func errf(syn uint8, format string, a ...any) *wqeError {
	return &wqeError{syn, fmt.Sprintf(format, a...)}
}

// readWQ reads n bytes of queue q at byte offset off through its page list.
func (m *Model) readWQ(q *wq, off uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	for done := 0; done < n; {
		a, ok := pageAddr(q.pas, off+uint64(done))
		if !ok {
			return nil, fmt.Errorf("offset %#x beyond the page list", off)
		}
		k := min(n-done, int(4096-a%4096))
		if err := m.mem.DeviceRead(dma.Addr(a), b[done:done+k]); err != nil {
			return nil, err
		}
		done += k
	}
	return b, nil
}

// errCQE builds a requester error CQE (cq.h struct mlx5_err_cqe:
// syndrome at 0x37, sop_drop_qpn at 0x38, wqe_counter at 0x3C, op_own
// MLX5_CQE_REQ_ERR 0xD in bits 7:4).
func errCQE(sqn, index uint32, syn uint8) []byte {
	e := make([]byte, 64)
	e[0x37] = syn
	binary.BigEndian.PutUint32(e[0x38:], sqn)
	binary.BigEndian.PutUint16(e[0x3C:], uint16(index))
	e[0x3F] = 0xD << 4
	return e
}

// wqebbs returns the size of the WQE at the card's counter from its
// ds_cnt (1 when unreadable or 0: the card steps over it).
func (m *Model) wqebbs(q *wq, size uint32) uint32 {
	ctrl, err := m.readWQ(q, uint64(q.ci&(size-1))*64, 16)
	if err != nil {
		return 1
	}
	return max(1, (u32(ctrl, 4)&0x3F+3)/4)
}

// flushSQ completes every WQE from the card's counter up to the doorbell
// record pc of an SQ in ERR with a flush error CQE of its own (syndrome
// MLX5_CQE_SYNDROME_WR_FLUSH_ERR 0x05, opcode MLX5_CQE_REQ_ERR), when the
// SQ was created with flush_in_error_en (mlx5_ifc.h sqc_bits; Linux sets
// it in mlx5e_create_sq and waits for these CQEs, cc == pc, before it
// resets the SQ: en/reporter_tx.c mlx5e_tx_reporter_err_cqe_recover,
// mlx5e_wait_for_sq_flush). The card writes them after the error CQE, in
// WQE order; under Faults.HoldFlush they stay in its pipeline until
// ReleaseFlush: late, possibly after the driver moved the SQ on.
func (m *Model) flushSQ(sqn uint32, q *wq, size, pc uint32) {
	if !q.flush {
		return
	}
	for q.ci != pc && (pc-q.ci)&0xFFFF <= size {
		e := errCQE(sqn, q.ci, 0x05)
		m.stats.TxFlushed++
		if m.faults.HoldFlush {
			m.lateFlush = append(m.lateFlush, lateCQE{q, q.cqn, e})
		} else {
			m.postCQE(q.cqn, e)
		}
		q.ci = (q.ci + m.wqebbs(q, size)) & 0xFFFF
	}
}

// lateCQE is a flush CQE the card has yet to write.
type lateCQE struct {
	q   *wq
	cqn uint32
	cqe []byte
}

// ReleaseFlush ends HoldFlush and writes the flush CQEs held meanwhile.
func (m *Model) ReleaseFlush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults.HoldFlush = false
	for _, l := range m.lateFlush {
		m.postCQE(l.cqn, l.cqe)
	}
	m.lateFlush = nil
}

// processSQ consumes the WQEs the doorbell record publishes.
func (m *Model) processSQ(sqn uint32, q *wq, db []byte) {
	if q.state == 3 {
		// ERR: nothing is executed; with flush_in_error_en what the
		// driver posts meanwhile is flushed too.
		m.flushSQ(sqn, q, uint32(1)<<q.logSize, atomicLoadBE(q.dbr[4:])&0xFFFF)
		return
	}
	if q.state != 1 {
		return // RST: nothing is executed
	}
	if !m.busMaster() {
		// The card cannot fetch the WQEs: with Bus Master Enable clear a
		// function issues no memory request (PCI Express Base 3.0,
		// 7.5.1.1 Command register bit 2; PCI Local Bus 3.0, 6.2.2).
		m.stats.DMABlocked++
		return
	}
	pc := atomicLoadBE(q.dbr[4:]) & 0xFFFF
	size := uint32(1) << q.logSize
	// The doorbell carries the control segment of a posted WQE.
	idx := uint32(binary.BigEndian.Uint16(db[1:3]))
	if (pc-idx-1)&0xFFFF >= size {
		m.violation("SQ %#x doorbell names WQE %d, not among those posted (record %d)", sqn, idx, pc)
	} else if w, err := m.readWQ(q, uint64(idx&(size-1))*64, 8); err == nil && string(w) != string(db) {
		m.violation("SQ %#x doorbell bytes %x differ from WQE %d's first 8 bytes %x", sqn, db, idx, w)
	}
	for q.ci != pc && q.state == 1 {
		if (pc-q.ci)&0xFFFF > size {
			m.violation("SQ %#x record %d is more than a ring ahead of the card (%d)", sqn, pc, q.ci)
			return
		}
		m.txTD = m.tises[q.tis] // the sender's transport domain (loopback.go)
		n, cqe, werr := m.execWQE(sqn, q, size)
		if werr != nil {
			m.stats.TxWQEErrors++
			m.violation("SQ %#x WQE %d: %s", sqn, q.ci, werr.msg)
			q.state = 3
			m.postCQE(q.cqn, errCQE(sqn, q.ci, werr.syn))
			q.ci = (q.ci + m.wqebbs(q, size)) & 0xFFFF
			m.flushSQ(sqn, q, size, pc)
			return
		}
		if cqe != nil {
			m.postCQE(q.cqn, cqe)
		}
		q.ci = (q.ci + n) & 0xFFFF
	}
}

// execWQE runs the WQE at the card's counter and returns its WQEBBs and,
// when it asked for one, its CQE.
func (m *Model) execWQE(sqn uint32, q *wq, size uint32) (uint32, []byte, *wqeError) {
	at := q.ci & (size - 1)
	ctrl, err := m.readWQ(q, uint64(at)*64, 16)
	if err != nil {
		return 0, nil, errf(synProt, "unreadable: %v", err)
	}
	w0, w1 := u32(ctrl, 0), u32(ctrl, 4)
	opcode, index := uint8(w0), (w0>>8)&0xFFFF
	ds := int(w1 & 0x3F)
	if index != q.ci {
		return 0, nil, errf(synQPOp, "wqe_index %d, card expects %d", index, q.ci)
	}
	if w1>>8 != sqn {
		return 0, nil, errf(synQPOp, "sqn %#x in a WQE of SQ %#x", w1>>8, sqn)
	}
	if ds == 0 {
		return 0, nil, errf(synQPOp, "ds count 0")
	}
	nbb := uint32(ds+3) / 4
	// A send WQE is at most max_wqe_sz_sq bytes (the general caps the
	// model reports; PRM "HCA Capabilities": maximum WQE size for an SQ;
	// Linux mlx5e_get_max_sq_wqebbs) and at most MLX5_SEND_WQE_MAX_WQEBBS
	// 16 (qp.h).
	if lim := uint32(min(16, m.opts.MaxWQESzSQ/64)); nbb > lim {
		return 0, nil, errf(synQPOp, "%d WQEBBs, max_wqe_sz_sq allows %d", nbb, lim)
	}
	if at+nbb > size && !m.faults.AllowWrap {
		return 0, nil, errf(synQPOp, "WQE of %d WQEBBs at %d crosses the end of a %d-WQEBB ring", nbb, at, size)
	}
	wqe := make([]byte, 0, nbb*64)
	for i := uint32(0); i < nbb; i++ {
		b, err := m.readWQ(q, uint64((at+i)&(size-1))*64, 64)
		if err != nil {
			return 0, nil, errf(synProt, "unreadable: %v", err)
		}
		wqe = append(wqe, b...)
	}
	wqe = wqe[:ds*16]
	var cqe []byte
	if ce := (ctrl[11] >> 2) & 3; ce >= 2 {
		cqe = make([]byte, 64)
		cqe[0x38] = opcode
		binary.BigEndian.PutUint32(cqe[0x38:], uint32(opcode)<<24|sqn)
		binary.BigEndian.PutUint16(cqe[0x3C:], uint16(q.ci))
		cqe[0x3F] = 0 // REQ
	}
	switch opcode {
	case opNOP:
		return nbb, cqe, nil
	case opSend, opLSO:
	default:
		return 0, nil, errf(synQPOp, "opcode %#x", opcode)
	}
	if ds < 2 {
		return 0, nil, errf(synQPOp, "send of %d DS has no eth segment", ds)
	}
	eth := wqe[16:]
	flags, mss, ihs := eth[4], int(binary.BigEndian.Uint16(eth[6:])), int(binary.BigEndian.Uint16(eth[12:]))
	inlDS := 1
	if ihs > 2 {
		inlDS += (ihs - 2 + 15) / 16
	}
	if 1+inlDS > ds {
		return 0, nil, errf(synLength, "inline header of %d bytes needs %d DS, WQE has %d", ihs, 1+inlDS, ds)
	}
	frame := append([]byte(nil), eth[14:14+ihs]...)
	for off := (1 + inlDS) * 16; off < ds*16; off += 16 {
		bc, lkey, addr := u32(wqe, off), u32(wqe, off+4), u64(wqe, off+8)
		if lkey != m.opts.ReservedLKey {
			return 0, nil, errf(synProt, "data segment lkey %#x, not the reserved lkey %#x", lkey, m.opts.ReservedLKey)
		}
		if bc == 0 || bc > 1<<20 {
			return 0, nil, errf(synLength, "data segment byte_count %d", bc)
		}
		p := make([]byte, bc)
		if err := m.mem.DeviceRead(dma.Addr(addr), p); err != nil {
			return 0, nil, errf(synProt, "data segment %#x+%d: %v", addr, bc, err)
		}
		if m.faults.DropSegment > 0 && off > (1+inlDS)*16 {
			// Faults.DropSegment: a data segment after the first is
			// skipped, as if the WQE had never carried it.
			m.faults.DropSegment--
			continue
		}
		frame = append(frame, p...)
	}
	if need := m.minInline(frame); ihs < need {
		return 0, nil, errf(synLength, "inline header %d bytes, inline mode %d needs %d", ihs, m.opts.inlineMode(), need)
	}
	if cqe != nil {
		binary.BigEndian.PutUint32(cqe[0x2C:], uint32(len(frame)))
	}
	maxFrame := m.macMTU() - 4 // hw MTU counts the FCS
	if opcode == opSend {
		if mss != 0 {
			return 0, nil, errf(synQPOp, "SEND with mss %d", mss)
		}
		if len(frame) > maxFrame {
			return 0, nil, errf(synLength, "frame of %d bytes exceeds the port and vport MTU (%d)", len(frame), maxFrame)
		}
		if m.faults.NoCsumInsert > 0 && flags&(csL3|csL4) != 0 {
			m.faults.NoCsumInsert--
		} else {
			m.csum(frame, flags)
		}
		m.emit(frame)
		return nbb, cqe, nil
	}
	if werr := m.lso(frame, ihs, mss, flags, maxFrame); werr != nil {
		return 0, nil, werr
	}
	return nbb, cqe, nil
}

// minInline is what the card's minimum inline mode requires inline.
func (m *Model) minInline(f []byte) int {
	need := 0
	mode := m.opts.inlineMode()
	switch mode {
	case 1:
		need = 18 // L2 with one VLAN tag
	case 2, 3:
		h, err := pkt.Parse(f)
		if err != nil {
			return min(len(f), 18)
		}
		need = h.L4
		if mode == 3 && h.Proto == pkt.ProtoTCP && len(f) >= h.L4+13 {
			need += int(f[h.L4+12]>>4) * 4
		} else if mode == 3 && h.Proto == pkt.ProtoUDP {
			need += 8
		}
	}
	return min(need, len(f))
}

// csum inserts the checksums cs_flags ask for, computed from scratch.
func (m *Model) csum(f []byte, flags uint8) {
	if flags&(csL3|csL4) == 0 {
		return
	}
	h, err := pkt.Parse(f)
	if err != nil || h.IPEnd > len(f) {
		return // not IP: the card leaves it alone
	}
	if flags&csL3 != 0 && !h.IPv6 {
		m.stats.TxCsumL3++
		f[h.L3+10], f[h.L3+11] = 0, 0
		binary.BigEndian.PutUint16(f[h.L3+10:], ^pkt.Fold(pkt.Sum(0, f[h.L3:h.L4])))
	}
	if flags&csL4 != 0 && h.CsumOff >= 0 {
		m.stats.TxCsumL4++
		f[h.CsumOff], f[h.CsumOff+1] = 0, 0
		seg := f[h.L4:h.IPEnd]
		c := ^pkt.Fold(pkt.Sum(pkt.PseudoSum(f[h.L3:], h.IPv6, h.Proto, len(seg)), seg))
		if c == 0 && h.Proto == pkt.ProtoUDP {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(f[h.CsumOff:], c)
	}
}

// lso segments a TCP packet as the LSO engine does (Linux NETIF_F_TSO
// semantics; per-field hardware behaviour is UNCONFIRMED, see the fact
// sheet): every segment gets a copy of the headers, IPv4 ID incremented per
// segment, lengths rewritten, sequence advanced by MSS, FIN and PSH only on
// the last segment, CWR only on the first, and checksums computed when the
// eth segment asks for them. The checksum field the driver left is ignored.
func (m *Model) lso(f []byte, ihs, mss int, flags uint8, maxFrame int) *wqeError {
	if mss == 0 {
		return errf(synQPOp, "LSO with mss 0")
	}
	h, err := pkt.Parse(f)
	if err != nil || h.Proto != pkt.ProtoTCP || h.Fragment || len(f) < h.L4+20 {
		return errf(synQPOp, "LSO of a packet that is not TCP over IP (%v)", err)
	}
	hl := h.L4 + int(f[h.L4+12]>>4)*4
	if ihs < hl {
		return errf(synLength, "LSO inline header %d bytes, headers end at %d", ihs, hl)
	}
	if len(f) > 1<<m.opts.MaxLSOLog {
		return errf(synLength, "LSO message of %d bytes exceeds 2^%d", len(f), m.opts.MaxLSOLog)
	}
	if hl+mss > maxFrame {
		return errf(synLength, "LSO mss %d makes %d-byte frames (port and vport max %d)", mss, hl+mss, maxFrame)
	}
	if h.IPEnd != len(f) {
		return errf(synLength, "IP length says %d bytes, WQE carries %d", h.IPEnd, len(f))
	}
	hdr, payload := f[:hl], f[hl:]
	m.stats.TxLSO++
	seq := binary.BigEndian.Uint32(hdr[h.L4+4:])
	id := uint16(0)
	if !h.IPv6 {
		id = binary.BigEndian.Uint16(hdr[h.L3+4:])
	}
	tcpFlags := hdr[h.L4+13]
	for i := 0; len(payload) > 0 || i == 0; i++ {
		k := min(mss, len(payload))
		s := append(append([]byte(nil), hdr...), payload[:k]...)
		payload = payload[k:]
		last := len(payload) == 0
		if h.IPv6 {
			binary.BigEndian.PutUint16(s[h.L3+4:], uint16(len(s)-h.L3-40))
		} else {
			binary.BigEndian.PutUint16(s[h.L3+2:], uint16(len(s)-h.L3))
			binary.BigEndian.PutUint16(s[h.L3+4:], id+uint16(i))
		}
		binary.BigEndian.PutUint32(s[h.L4+4:], seq+uint32(i*mss))
		fl := tcpFlags
		if !last {
			fl &^= 0x01 | 0x08 // FIN, PSH
		}
		if i > 0 {
			fl &^= 0x80 // CWR
		}
		s[h.L4+13] = fl
		m.csum(s, flags)
		m.stats.TxSegments++
		m.emit(s)
	}
	return nil
}

// Deliver hands the model a frame from the wire. It reports whether the
// frame reached a receive buffer.
func (m *Model) Deliver(frame []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deliverLocked(frame, false, 0)
}

// deliverLocked steers frame to the root flow table's TIR and its RQ:
// from the wire, or (looped) transmitted by this function, kind saying
// unicast or multicast (tirSelfLB*): the TIR, in the transport domain of
// the function's TISes, takes it only when its self_lb_block has that
// bit (loopback.go).
func (m *Model) deliverLocked(frame []byte, looped bool, kind uint8) bool {
	if !m.busMaster() || !m.inited || m.torn {
		m.stats.RxNoSteering++
		return false
	}
	fe, ok := m.ftes[[2]uint32{m.root, 0}]
	var rq *wq
	if ok {
		rq = m.rqs[m.tirs[fe.tir][0]]
	}
	if looped && rq != nil {
		if m.tirs[fe.tir][1] == m.txTD && m.tirLB[fe.tir]&kind == 0 {
			m.stats.RxSelfLBBlocked++ // self loopback not allowed by the TIR
			return false
		}
		m.stats.RxLoopback++
	}
	if !m.adminUp && !looped {
		m.stats.RxPortDown++ // PAOS admin status down: the port takes nothing
		return false
	}
	if rq != nil && rq.state == 3 {
		m.stats.RxQueueError++ // an RQ in ERR takes nothing
		return false
	}
	if rq == nil || rq.state != 1 {
		m.stats.RxNoSteering++
		return false
	}
	pc := atomicLoadBE(rq.dbr[0:]) & 0xFFFF
	if rq.ci == pc {
		m.stats.RxNoBuffer++
		return false
	}
	size, stride := uint32(1)<<rq.logSize, 1<<rq.logStride
	wqe, err := m.readWQ(rq, uint64(rq.ci&(size-1))*uint64(stride), stride)
	cqe := make([]byte, 64)
	binary.BigEndian.PutUint16(cqe[0x3C:], uint16(rq.ci))
	binary.BigEndian.PutUint32(cqe[0x2C:], uint32(len(frame)))
	rq.ci = (rq.ci + 1) & 0xFFFF
	ready := false // Faults.FailRxReady
	fail := func(syn uint8, format string, a ...any) bool {
		m.stats.RxErrors++
		if format != "" {
			m.violation("RQ WQE: "+format, a...)
		}
		cqe[0x37] = syn
		cqe[0x3F] = 0xE << 4
		m.postCQE(rq.cqn, cqe)
		if rqFatal(syn) && !ready {
			m.rqError(rq, pc)
		}
		return false
	}
	if syn := m.faults.FailRx; syn != 0 {
		ready = m.faults.FailRxReady
		m.faults.FailRx, m.faults.FailRxReady = 0, false
		return fail(syn, "")
	}
	if err != nil {
		return fail(synProt, "unreadable: %v", err)
	}
	left := frame
	for off := 0; off < stride && len(left) > 0; off += 16 {
		bc, lkey, addr := u32(wqe, off), u32(wqe, off+4), u64(wqe, off+8)
		if lkey == 0x100 {
			break // MLX5_INVALID_LKEY ends a short list
		}
		if lkey != m.opts.ReservedLKey {
			return fail(synProt, "lkey %#x", lkey)
		}
		k := min(int(bc), len(left))
		if err := m.mem.DeviceWrite(dma.Addr(addr), left[:k]); err != nil {
			return fail(synProt, "buffer %#x+%d: %v", addr, k, err)
		}
		left = left[k:]
	}
	if len(left) > 0 {
		m.stats.RxErrors++
		cqe[0x37] = synLength
		cqe[0x3F] = 0xE << 4
		m.postCQE(rq.cqn, cqe)
		return false
	}
	m.rxVerdict(frame, cqe)
	cqe[0x3F] = 0x2 << 4 // RESP_SEND
	m.stats.RxFrames++
	m.postCQE(rq.cqn, cqe)
	return true
}

// rqFatal reports whether a responder error with syndrome syn moves the
// RQ to ERR. Only the syndromes Linux recovers an RQ from do: 0x02
// LOCAL_QP_OP_ERR, 0x04 LOCAL_PROT_ERR, 0x05 WR_FLUSH_ERR (en/health.h
// cqe_syndrome_needs_recover; en_rx.c trigger_report queues the recovery
// for no other). Linux has no way back for an RQ in ERR after any other
// syndrome, so the card is taken to leave the RQ ready then: the error
// CQE completes that one WQE, as a length error (0x01) does (the function
// as first added listed 0x01 too; current kernels do not). The PRM's own
// table was not available to check this against.
func rqFatal(syn uint8) bool { return syn == 0x02 || syn == 0x04 || syn == 0x05 }

// rqError moves an RQ to ERR after a responder error rqFatal names and,
// with flush_in_error_en, completes every WQE posted up to the
// doorbell record pc with a flush error CQE (MLX5_CQE_RESP_ERR, syndrome
// MLX5_CQE_SYNDROME_WR_FLUSH_ERR 0x05). Linux recovers the RQ only after
// such a syndrome (rqFatal) and only from ERR (en/reporter_rx.c mlx5e_rx_reporter_err_rq_cqe_recover: query the
// state, ERR->RST, free the descriptors, RST->RDY); it sets
// flush_in_error_en on its RQs (en_main.c mlx5e_create_rq).
func (m *Model) rqError(rq *wq, pc uint32) {
	rq.state = 3
	if !rq.flush {
		return
	}
	for rq.ci != pc {
		e := make([]byte, 64)
		binary.BigEndian.PutUint16(e[0x3C:], uint16(rq.ci))
		e[0x37] = 0x05
		e[0x3F] = 0xE << 4
		m.stats.RxFlushed++
		if m.faults.HoldFlush {
			m.lateFlush = append(m.lateFlush, lateCQE{rq, rq.cqn, e})
		} else {
			m.postCQE(rq.cqn, e)
		}
		rq.ci = (rq.ci + 1) & 0xFFFF
	}
}

// rxVerdict fills the CQE's checksum fields from the frame.
func (m *Model) rxVerdict(f []byte, cqe []byte) {
	cqe[0x1C] = 0x01 // L2_OK
	h, err := pkt.Parse(f)
	if err != nil || h.IPEnd > len(f) {
		return
	}
	l3t := uint8(2)
	if h.IPv6 {
		l3t = 1
	}
	var l4t uint8
	switch h.Proto {
	case pkt.ProtoUDP:
		l4t = 2
	case pkt.ProtoTCP:
		l4t = 1
		if len(f) >= h.L4+14 && f[h.L4+13]&0x10 != 0 {
			l4t = 3
			if h.IPEnd > h.L4+int(f[h.L4+12]>>4)*4 {
				l4t = 4
			}
		}
	}
	cqe[0x1D] = l4t<<4 | l3t<<2
	binary.BigEndian.PutUint16(cqe[0x14:], pkt.Fold(pkt.Sum(0, f[h.L3:h.IPEnd])))
	if !pkt.IPv4HeaderOK(f, &h) {
		return
	}
	cqe[0x1C] |= 0x02
	ok, checked := pkt.TransportOK(f, &h)
	if checked && m.faults.WrongVerdict > 0 {
		// Faults.WrongVerdict: the L4 verdict turned over.
		m.faults.WrongVerdict--
		ok = !ok
	}
	if ok && checked {
		cqe[0x1C] |= 0x04
	}
}
