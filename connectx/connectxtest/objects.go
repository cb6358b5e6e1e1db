package connectxtest

// Object commands. Context offsets are mlx5_ifc.h's, in bytes: the create
// commands carry their context at 0x10 (EQ, CQ) or 0x20 (SQ, RQ, TIS, TIR),
// the work queue structure (wq_bits) at SQ/RQ context + 0x30, page lists
// at 0x110.

// pasList reads n page addresses at in[off:]; ok is false when the input
// is too short or an address is not 4 KiB aligned.
func pasList(in []byte, off, n int) ([]uint64, bool) {
	if len(in) < off+8*n {
		return nil, false
	}
	p := make([]uint64, n)
	for i := range p {
		p[i] = u64(in, off+8*i)
		if p[i]%4096 != 0 || p[i] == 0 {
			return nil, false
		}
	}
	return p, true
}

func pagesFor(bytes uint64, logPage uint32) int {
	ps := uint64(4096) << logPage
	return int((bytes + ps - 1) / ps)
}

// expand turns a list of 2^logPage pages into 4 KiB pages.
func expand(p []uint64, logPage uint32) []uint64 {
	if logPage == 0 {
		return p
	}
	var o []uint64
	for _, a := range p {
		for i := uint64(0); i < 1<<logPage; i++ {
			o = append(o, a+i*4096)
		}
	}
	return o
}

func (m *Model) object(op, opmod uint16, in, out []byte) (uint8, uint32) {
	id := bitsAt(in, 0x08, 23, 0)
	switch op {
	case 0x802: // ALLOC_UAR
		for u := uint32(1); u < uarPages; u++ {
			if !m.uars[u] {
				m.uars[u] = true
				set32(out, 0x08, u)
				return stOK, 0
			}
		}
		return 0x0F, 0
	case 0x803: // DEALLOC_UAR
		if !m.uars[id] {
			return stBadResource, id
		}
		for _, e := range m.eqs {
			if e.uar == id {
				return stBusy, id
			}
		}
		for _, c := range m.cqs {
			if c.uar == id {
				return stBusy, id
			}
		}
		for _, w := range m.allWQs() {
			if w.uar == id {
				return stBusy, id
			}
		}
		delete(m.uars, id)
		return stOK, 0
	case 0x301:
		return m.createEQ(in, out)
	case 0x302:
		eqn := bitsAt(in, 0x08, 7, 0)
		if m.eqs[eqn] == nil {
			return stBadResource, eqn
		}
		for _, c := range m.cqs {
			if c.eqn == eqn {
				return stBusy, eqn
			}
		}
		delete(m.eqs, eqn)
		return stOK, 0
	case 0x800, 0x816: // ALLOC_PD, ALLOC_TRANSPORT_DOMAIN
		n := m.alloc()
		if op == 0x800 {
			m.pds[n] = true
		} else {
			m.tds[n] = true
		}
		set32(out, 0x08, n)
		return stOK, 0
	case 0x801:
		if !m.pds[id] {
			return stBadResource, id
		}
		for _, w := range m.allWQs() {
			if w.pd == id {
				return stBusy, id
			}
		}
		delete(m.pds, id)
		return stOK, 0
	case 0x817:
		if !m.tds[id] {
			return stBadResource, id
		}
		for _, td := range m.tises {
			if td == id {
				return stBusy, id
			}
		}
		for _, t := range m.tirs {
			if t[1] == id {
				return stBusy, id
			}
		}
		delete(m.tds, id)
		return stOK, 0
	case 0x203: // QUERY_SPECIAL_CONTEXTS
		set32(out, 0x0C, m.opts.ReservedLKey)
		return stOK, 0
	case 0x754: // QUERY_NIC_VPORT_CONTEXT
		c := out[0x10:]
		set32(c, 0, uint32(m.opts.MinInlineMode)<<24|m.vportLB)
		set32(c, 0x24, m.mtu)
		set32(c, 0xF0, m.promisc)
		mac := m.opts.MAC
		set32(c, 0xF4, uint32(mac[0])<<8|uint32(mac[1]))
		copy(c[0xF8:], mac[2:])
		return stOK, 0
	case 0x755: // MODIFY_NIC_VPORT_CONTEXT
		fs := u32(in, 0x0C)
		allowed := uint32(1<<6 | 1<<4)
		if m.lbCaps()&capDisableLBUC != 0 {
			allowed |= fsDisableUC
		}
		if m.lbCaps()&capDisableLBMC != 0 {
			allowed |= fsDisableMC
		}
		if fs&^allowed != 0 {
			return stBadParam, fs
		}
		c := in[0x100:]
		if fs&fsDisableUC != 0 {
			m.vportLB = m.vportLB&^vportDisableUC | u32(c, 0)&vportDisableUC
		}
		if fs&fsDisableMC != 0 {
			m.vportLB = m.vportLB&^vportDisableMC | u32(c, 0)&vportDisableMC
		}
		if fs&(1<<6) != 0 {
			mtu := u32(c, 0x24) & 0xFFFF
			if mtu < 68 || mtu > 9978 {
				return stBadParam, mtu
			}
			m.mtu = mtu
			if m.opts.PortMTU != 0 && mtu > uint32(m.opts.PortMTU) {
				m.mtu = uint32(m.opts.PortMTU) // the port's limit wins
			}
		}
		if fs&(1<<4) != 0 {
			m.promisc = u32(c, 0xF0) & 0xE0000000
		}
		return stOK, 0
	case 0x805: // ACCESS_REGISTER
		return m.accessRegister(opmod, in, out)
	case 0x750: // QUERY_VPORT_STATE
		st := uint32(0x10) // admin up
		if m.portUp() {
			st |= 1
		}
		set32(out, 0x0C, st)
		return stOK, 0
	case 0x400:
		return m.createCQ(in, out)
	case 0x401:
		if m.cqs[id] == nil {
			return stBadResource, id
		}
		for _, w := range m.allWQs() {
			if w.cqn == id {
				return stBusy, id
			}
		}
		delete(m.cqs, id)
		return stOK, 0
	case 0x912: // CREATE_TIS
		td := bitsAt(in, 0x44, 23, 0)
		if !m.tds[td] {
			return stBadResource, td
		}
		n := m.alloc()
		m.tises[n] = td
		set32(out, 0x08, n)
		return stOK, 0
	case 0x914:
		if _, ok := m.tises[id]; !ok {
			return stBadResource, id
		}
		for _, w := range m.sqs {
			if w.tis == id {
				return stBusy, id
			}
		}
		delete(m.tises, id)
		return stOK, 0
	case 0x904, 0x908:
		return m.createWQ(op == 0x904, in, out)
	case 0x905, 0x909:
		return m.modifyWQ(op == 0x905, in)
	case 0x906:
		if m.sqs[id] == nil {
			return stBadResource, id
		}
		delete(m.sqs, id)
		return stOK, 0
	case 0x90B:
		// QUERY_RQ (mlx5_ifc.h query_rq_in: rqn at 0x08 bits 23..0;
		// query_rq_out: rq_context at 0x20, rqc state in its first
		// dword, bits 23..20).
		q := m.rqs[id]
		if q == nil {
			return stBadResource, id
		}
		set32(out, 0x20, q.state<<20)
		return stOK, 0
	case 0x90A:
		if m.rqs[id] == nil {
			return stBadResource, id
		}
		for _, t := range m.tirs {
			if t[0] == id {
				return stBusy, id
			}
		}
		delete(m.rqs, id)
		return stOK, 0
	case 0x900: // CREATE_TIR
		if d := bitsAt(in, 0x24, 31, 28); d != 0 {
			return stBadParam, d // only direct dispatch is modelled
		}
		rqn, td := bitsAt(in, 0x3C, 23, 0), bitsAt(in, 0x44, 23, 0)
		if m.rqs[rqn] == nil || !m.tds[td] {
			return stBadResource, rqn
		}
		n := m.alloc()
		m.tirs[n] = [2]uint32{rqn, td}
		m.tirLB[n] = uint8(bitsAt(in, 0x44, 25, 24))
		set32(out, 0x08, n)
		return stOK, 0
	case 0x902:
		if _, ok := m.tirs[id]; !ok {
			return stBadResource, id
		}
		for _, f := range m.ftes {
			if f.tir == id {
				return stBusy, id
			}
		}
		delete(m.tirs, id)
		delete(m.tirLB, id)
		return stOK, 0
	case 0x901: // MODIFY_TIR
		return m.modifyTIR(in)
	}
	return m.flow(op, opmod, in, out)
}

func (m *Model) createEQ(in, out []byte) (uint8, uint32) {
	c := in[0x10:]
	logSize, uar, logPage := bitsAt(c, 0x0C, 28, 24), bitsAt(c, 0x0C, 23, 0), bitsAt(c, 0x18, 28, 24)
	if !m.uars[uar] {
		return stBadResource, uar
	}
	if logSize > 22 {
		return stBadParam, logSize
	}
	p, ok := pasList(in, 0x110, pagesFor(64<<logSize, logPage))
	if !ok {
		return stBadParam, 0x110
	}
	for n := uint32(7); n < 256; n++ {
		if m.eqs[n] == nil {
			m.eqs[n] = &eq{logSize: logSize, uar: uar, pas: expand(p, logPage), mask: u64(in, 0x58)}
			set32(out, 0x08, n)
			return stOK, 0
		}
	}
	return 0x0F, 0
}

func (m *Model) createCQ(in, out []byte) (uint8, uint32) {
	c := in[0x10:]
	w0 := u32(c, 0)
	if sz := (w0 >> 21) & 7; sz != 0 {
		return stBadParam, sz // 64-byte CQEs only
	}
	if (w0>>14)&1 != 0 {
		return stBadParam, w0 // CQE compression is kept off
	}
	logSize, uar := bitsAt(c, 0x0C, 28, 24), bitsAt(c, 0x0C, 23, 0)
	eqn, logPage := bitsAt(c, 0x14, 7, 0), bitsAt(c, 0x18, 28, 24)
	if !m.uars[uar] {
		return stBadResource, uar
	}
	if m.eqs[eqn] == nil {
		return stBadResource, eqn
	}
	if logSize > 22 {
		return stBadParam, logSize
	}
	p, ok := pasList(in, 0x110, pagesFor(64<<logSize, logPage))
	if !ok {
		return stBadParam, 0x110
	}
	dbr := u64(c, 0x38)
	if dbr%8 != 0 {
		return stBadParam, uint32(dbr)
	}
	rec := m.coherent(dbr, 8)
	if rec == nil {
		return stBadParam, uint32(dbr)
	}
	n := m.alloc()
	m.cqs[n] = &cq{logSize: logSize, uar: uar, eqn: eqn, cc: (w0>>20)&1 != 0, oi: (w0>>17)&1 != 0,
		pas: expand(p, logPage), dbr: rec}
	set32(out, 0x08, n)
	return stOK, 0
}

func (m *Model) allWQs() []*wq {
	var o []*wq
	for _, w := range m.sqs {
		o = append(o, w)
	}
	for _, w := range m.rqs {
		o = append(o, w)
	}
	return o
}

func (m *Model) createWQ(send bool, in, out []byte) (uint8, uint32) {
	c := in[0x20:]
	w0 := u32(c, 0)
	q := &wq{isSend: send, rlkey: w0>>31 != 0, cqn: bitsAt(c, 0x08, 23, 0)}
	if st := (w0 >> 20) & 0xF; st != 0 {
		return stBadParam, st // created in RST
	}
	if !q.rlkey {
		return stBadParam, 0x31 // the model only does physical addressing with the reserved lkey
	}
	if !send {
		q.flush = (w0>>18)&1 != 0 // rqc flush_in_error_en (bit 0x0D)
	}
	if send {
		// min_wqe_inline_mode (sqc bits 26:24) is taken from the SQ
		// context only when the caps say wqe_inline_mode 1, "from the
		// vport context"; Linux sets it only then (en_main.c
		// mlx5e_create_sq). Otherwise the model refuses a non-zero value.
		if mi := (w0 >> 24) & 7; mi != 0 && m.opts.wqeInlineCap() != 1 {
			return stBadParam, mi
		}
		q.flush = (w0>>28)&1 != 0
		if n := bitsAt(c, 0x20, 31, 16); n != 1 {
			return stBadParam, n
		}
		q.tis = bitsAt(c, 0x2C, 23, 0)
		if _, ok := m.tises[q.tis]; !ok {
			return stBadResource, q.tis
		}
	}
	if m.cqs[q.cqn] == nil {
		return stBadResource, q.cqn
	}
	w := c[0x30:]
	if t := bitsAt(w, 0, 31, 28); t != 1 {
		return stBadParam, t // cyclic
	}
	q.pd, q.uar = bitsAt(w, 0x08, 23, 0), bitsAt(w, 0x0C, 23, 0)
	if !m.pds[q.pd] {
		return stBadResource, q.pd
	}
	if !m.uars[q.uar] {
		return stBadResource, q.uar
	}
	q.logStride, q.logSize = bitsAt(w, 0x20, 19, 16), bitsAt(w, 0x20, 4, 0)
	logPage := bitsAt(w, 0x20, 12, 8)
	if send && q.logStride != 6 || !send && (q.logStride < 4 || q.logStride > 11) {
		return stBadParam, q.logStride
	}
	if q.logSize > 16 {
		return stBadParam, q.logSize
	}
	dbr := u64(w, 0x10)
	if dbr%8 != 0 {
		return stBadParam, uint32(dbr)
	}
	if q.dbr = m.coherent(dbr, 8); q.dbr == nil {
		return stBadParam, uint32(dbr)
	}
	p, ok := pasList(in, 0x20+0x30+0xC0, pagesFor(uint64(1)<<(q.logSize+q.logStride), logPage))
	if !ok {
		return stBadParam, 0x110
	}
	q.pas = expand(p, logPage)
	n := m.alloc()
	if send {
		m.sqs[n] = q
	} else {
		m.rqs[n] = q
	}
	set32(out, 0x08, n)
	return stOK, 0
}

func (m *Model) modifyWQ(send bool, in []byte) (uint8, uint32) {
	n, cur := bitsAt(in, 0x08, 23, 0), bitsAt(in, 0x08, 31, 28)
	q := m.rqs[n]
	if send {
		q = m.sqs[n]
	}
	if q == nil {
		return stBadResource, n
	}
	if q.state != cur {
		return stBadResState, q.state
	}
	next := bitsAt(in, 0x20, 23, 20)
	switch {
	case cur == 0 && next == 1, cur == 1 && next == 3, cur == 1 && next == 0, cur == 3 && next == 0:
	default:
		return stBadParam, cur<<4 | next
	}
	if next == 0 {
		// The driver resets its counters with the SQ (Linux
		// mlx5e_reset_txqsq_cc_pc), and may do so only once every WQE
		// came back with its CQE: mlx5e_tx_reporter_err_cqe_recover
		// waits for the flush (cc == pc) before MODIFY_SQ ERR->RST.
		for _, l := range m.lateFlush {
			if l.q == q {
				m.violation("MODIFY_%s %#x to RST while the card still owes flush CQEs for its WQEs", map[bool]string{true: "SQ", false: "RQ"}[send], n)
				break
			}
		}
		q.ci = 0
	}
	q.state = next
	return stOK, 0
}
