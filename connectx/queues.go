package connectx

import (
	"encoding/binary"
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// create runs a create/alloc command and returns the object number at
// output 0x08 (24 bits), registering destroy with the number at input
// 0x08 for teardown.
func (n *NIC) create(name string, in []byte, destroy uint16) (uint32, error) {
	out, err := n.exec(in, 0x10)
	if err != nil {
		return 0, fmt.Errorf("connectx: %s: %w", name, err)
	}
	id := binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push(name, func() error {
		d := newIn(destroy, 0, 0x10)
		put32(d, 0x08, id)
		_, err := n.exec(d, 0x10)
		return err
	})
	return id, nil
}

// ring allocates a coherent, page-aligned ring of n bytes filled with fill,
// freed at teardown.
func (n *NIC) ring(name string, size int, fill byte) (dma.Buffer, error) {
	b, err := n.mem.Alloc(max(size, PageSize), PageSize, dma.Coherent)
	if err != nil {
		return dma.Buffer{}, fmt.Errorf("connectx: %s ring: %w", name, err)
	}
	for i := range b.Bytes() {
		b.Bytes()[i] = fill
	}
	n.pushMem(name+" memory", func() error { return n.mem.Free(b) })
	return b, nil
}

// pas writes the physical address list of buf (4 KiB pages) at in[off:].
func pas(in []byte, off int, buf dma.Buffer) {
	for i := 0; i < (buf.Len()+PageSize-1)/PageSize; i++ {
		put64(in, off+8*i, uint64(buf.Addr())+uint64(i*PageSize))
	}
}

func log2(n int) uint32 {
	l := uint32(0)
	for 1<<l < n {
		l++
	}
	return l
}

const eqLog = 6 // 64 event entries

func (n *NIC) createQueues() error {
	var err error
	if n.obj.uar, err = n.create("ALLOC_UAR", newIn(OpAllocUAR, 0, 0x10), OpDeallocUAR); err != nil {
		return err
	}
	// Every doorbell is a store to this page: one beyond the mapping
	// would be dropped (the card never rung) or reach another device.
	if end := (uint64(n.obj.uar) + 1) * UARPageSize; n.cfg.BAR0Size != 0 && end > uint64(n.cfg.BAR0Size) {
		return fmt.Errorf("%w: UAR %d at BAR0 %#x..%#x, %#x bytes mapped", ErrUARUnmapped, n.obj.uar, end-UARPageSize, end, n.cfg.BAR0Size)
	}
	if n.dbr, err = n.ring("doorbell records", PageSize, 0); err != nil {
		return err
	}
	// EQ: page requests, port changes, CQ errors.
	if n.eq.buf, err = n.ring("EQ", 64<<eqLog, EQEOwnerInit); err != nil {
		return err
	}
	n.eq.logSize = eqLog
	in := newIn(OpCreateEQ, 0, 0x110+8*((64<<eqLog+PageSize-1)/PageSize))
	Field{0x10 + 0x0C, 28, 24}.Set(in, eqLog)
	Field{0x10 + 0x0C, 23, 0}.Set(in, n.obj.uar)
	put64(in, 0x58, 1<<EventCQError|1<<EventPortChange|1<<EventPageRequest)
	pas(in, 0x110, n.eq.buf)
	out, err := n.exec(in, 0x10)
	if err != nil {
		return fmt.Errorf("connectx: CREATE_EQ: %w", err)
	}
	n.obj.eqn = uint32(out[0x0B])
	n.push("DESTROY_EQ", func() error {
		d := newIn(OpDestroyEQ, 0, 0x10)
		put32(d, 0x08, n.obj.eqn)
		_, err := n.exec(d, 0x10)
		return err
	})
	if n.obj.pd, err = n.create("ALLOC_PD", newIn(OpAllocPD, 0, 0x10), OpDeallocPD); err != nil {
		return err
	}
	if n.obj.td, err = n.create("ALLOC_TRANSPORT_DOMAIN", newIn(OpAllocTransportDomain, 0, 0x10), OpDeallocTransportDom); err != nil {
		return err
	}
	out, err = n.exec(newIn(OpQuerySpecialContexts, 0, 0x10), 0x10)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_SPECIAL_CONTEXTS: %w", err)
	}
	n.obj.rlkey = binary.BigEndian.Uint32(out[0x0C:])
	// CQs: one entry per WQEBB (TX) or buffer (RX), so neither can overrun.
	if n.obj.txcq, err = n.createCQ("TX CQ", &n.txcq, n.cfg.TxRing, 128); err != nil {
		return err
	}
	if n.obj.rxcq, err = n.createCQ("RX CQ", &n.rxcq, n.cfg.RxRing, 192); err != nil {
		return err
	}
	in = newIn(OpCreateTIS, 0, 0xC0)
	put32(in, 0x20+0x24, n.obj.td)
	if n.obj.tis, err = n.create("CREATE_TIS", in, OpDestroyTIS); err != nil {
		return err
	}
	if err := n.createSQ(); err != nil {
		return err
	}
	return n.createRQ()
}

func (n *NIC) createCQ(name string, q *queue, entries int, dbrOff int) (uint32, error) {
	var err error
	if q.buf, err = n.ring(name, entries*CQESize, 0xFF); err != nil {
		return 0, err
	}
	for i := 0; i < entries; i++ {
		q.buf.Bytes()[i*CQESize+63] = CQEOpOwnInit
	}
	q.logSize = uint(log2(entries))
	in := newIn(OpCreateCQ, 0, 0x110+8*((q.buf.Len()+PageSize-1)/PageSize))
	ctx := in[0x10:]
	Field{0x0C, 28, 24}.Set(ctx, uint32(q.logSize))
	Field{0x0C, 23, 0}.Set(ctx, n.obj.uar)
	Field{0x14, 7, 0}.Set(ctx, n.obj.eqn)
	put64(ctx, 0x38, uint64(n.dbr.Addr())+uint64(dbrOff))
	pas(in, 0x110, q.buf)
	return n.create(name, in, OpDestroyCQ)
}

// wq fills a work queue structure (mlx5_ifc wq_bits) at w.
func (n *NIC) wq(w []byte, buf dma.Buffer, logStride, logSize uint32, dbr uint64) {
	Field{0x00, 31, 28}.Set(w, 1) // cyclic
	Field{0x08, 23, 0}.Set(w, n.obj.pd)
	Field{0x0C, 23, 0}.Set(w, n.obj.uar)
	put64(w, 0x10, dbr)
	Field{0x20, 19, 16}.Set(w, logStride)
	Field{0x20, 12, 8}.Set(w, 0) // 4 KiB pages
	Field{0x20, 4, 0}.Set(w, logSize)
	pas(w, 0xC0, buf)
}

func (n *NIC) modifyState(op uint16, qn uint32, from, to uint32) error {
	in := newIn(op, 0, 0x110)
	put32(in, 0x08, from<<28|qn)
	Field{0x20, 23, 20}.Set(in, to)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: modify queue %#x %d->%d: %w", qn, from, to, err)
	}
	return nil
}

func (n *NIC) createSQ() error {
	var err error
	if n.sq.buf, err = n.ring("SQ", n.cfg.TxRing*WQEBB, 0); err != nil {
		return err
	}
	n.sq.size = uint32(n.cfg.TxRing)
	n.sq.slots = make([]txSlot, n.cfg.TxRing)
	n.pushMem("queued sends", n.abortTx)
	in := newIn(OpCreateSQ, 0, 0x110+8*(n.sq.buf.Len()/PageSize))
	ctx := in[0x20:]
	// rlkey, flush_in_error_en, and min_wqe_inline_mode only when the
	// caps' wqe_inline_mode is "from the vport context" (Linux
	// mlx5e_create_sq).
	w0 := uint32(1<<31 | 1<<28)
	if n.caps.WQEInlineMode == 1 {
		w0 |= uint32(n.caps.MinInlineMode) << 24
	}
	put32(ctx, 0, w0)
	put32(ctx, 0x08, n.obj.txcq)
	put32(ctx, 0x20, 1<<16) // tis_lst_sz
	put32(ctx, 0x2C, n.obj.tis)
	n.wq(ctx[0x30:], n.sq.buf, 6, log2(n.cfg.TxRing), uint64(n.dbr.Addr()))
	if n.obj.sq, err = n.create("CREATE_SQ", in, OpDestroySQ); err != nil {
		return err
	}
	return n.modifyState(OpModifySQ, n.obj.sq, StateRST, StateRDY)
}

func (n *NIC) createRQ() error {
	var err error
	if n.rq.buf, err = n.ring("RQ", n.cfg.RxRing*DSSize, 0); err != nil {
		return err
	}
	n.rq.size = uint32(n.cfg.RxRing)
	in := newIn(OpCreateRQ, 0, 0x110+8*((n.rq.buf.Len()+PageSize-1)/PageSize))
	ctx := in[0x20:]
	// rlky, vsd (VLAN strip disable), flush_in_error_en (rqc bit 0x0D:
	// after an error the card returns every posted WQE with a flush CQE,
	// as Linux's mlx5e_create_rq asks)
	put32(ctx, 0, 1<<31|1<<28|1<<18)
	put32(ctx, 0x08, n.obj.rxcq)
	n.wq(ctx[0x30:], n.rq.buf, 4, log2(n.cfg.RxRing), uint64(n.dbr.Addr())+64)
	if n.obj.rq, err = n.create("CREATE_RQ", in, OpDestroyRQ); err != nil {
		return err
	}
	if err := n.allocRx(); err != nil {
		return err
	}
	return n.modifyState(OpModifyRQ, n.obj.rq, StateRST, StateRDY)
}

// steering creates the TIR and a flow table with one wildcard entry to it.
func (n *NIC) steering() error {
	in := newIn(OpCreateTIR, 0, 0x110) // create_tir_in: 0x20 + tirc 0xF0 (mlx5_ifc.h)
	ctx := in[0x20:]
	Field{0x04, 31, 28}.Set(ctx, 0) // direct dispatch
	put32(ctx, 0x1C, n.obj.rq)
	put32(ctx, 0x24, n.obj.td)
	var err error
	if n.obj.tir, err = n.create("CREATE_TIR", in, OpDestroyTIR); err != nil {
		return err
	}
	in = newIn(OpCreateFlowTable, 0, 0x40)
	put32(in, 0x10, 0) // NIC RX
	Field{0x18, 23, 16}.Set(in, 0)
	Field{0x18, 7, 0}.Set(in, 0) // log_size 0: one entry
	out, err := n.exec(in, 0x10)
	if err != nil {
		return fmt.Errorf("connectx: CREATE_FLOW_TABLE: %w", err)
	}
	n.obj.ft = binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push("DESTROY_FLOW_TABLE", func() error {
		d := newIn(OpDestroyFlowTable, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpCreateFlowGroup, 0, 0x400)
	put32(in, 0x14, n.obj.ft)
	put32(in, 0x1C, 0)
	put32(in, 0x24, 0)
	if out, err = n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: CREATE_FLOW_GROUP: %w", err)
	}
	n.obj.fg = binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push("DESTROY_FLOW_GROUP", func() error {
		d := newIn(OpDestroyFlowGroup, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		put32(d, 0x18, n.obj.fg)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpSetFlowTableEntry, 0, 0x40+0x300+8)
	put32(in, 0x14, n.obj.ft)
	put32(in, 0x20, 0)
	fc := in[0x40:]
	put32(fc, 0x04, n.obj.fg)
	put32(fc, 0x0C, 4) // action: forward to destination
	put32(fc, 0x10, 1) // destination_list_size
	put32(fc, 0x300, 2<<24|n.obj.tir)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: SET_FLOW_TABLE_ENTRY: %w", err)
	}
	n.push("DELETE_FLOW_TABLE_ENTRY", func() error {
		d := newIn(OpDeleteFlowTableEntry, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		put32(d, 0x20, 0)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpSetFlowTableRoot, 0, 0x40)
	put32(in, 0x14, n.obj.ft)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: SET_FLOW_TABLE_ROOT: %w", err)
	}
	// No undo of its own: at Close the root table is destroyed directly,
	// as Linux destroys the last table of the NIC RX root (fs_core.c
	// update_root_ft_destroy: no next table, so root_ft = NULL and no
	// command). SET_FLOW_TABLE_ROOT op_mod 1 (disconnect) is for an IPoIB
	// underlay QPN, or a NIC TX root with reset_root_to_default.
	return nil
}
