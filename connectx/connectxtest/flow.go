package connectxtest

func (m *Model) flow(op, opmod uint16, in, out []byte) (uint8, uint32) {
	if tt := bitsAt(in, 0x10, 31, 24); tt != 0 {
		return stBadParam, tt // NIC RX tables only
	}
	tid := bitsAt(in, 0x14, 23, 0)
	switch {
	case op == 0x92F && opmod != 0:
		// SET_FLOW_TABLE_ROOT op_mod 1 (disconnect) is what Linux sends
		// only to drop an IPoIB underlay QPN (fs_cmd.c
		// mlx5_cmd_update_root_ft with disconnect, from
		// mlx5_fs_remove_rx_underlay_qpn) or, in later kernels, to reset a
		// NIC TX root when the flow table caps report
		// reset_root_to_default (mlx5_ifc.h flow_table_prop_layout). An
		// Ethernet function's NIC RX root with no underlay QPN is never
		// disconnected so: Linux destroys its last root table directly
		// (fs_core.c update_root_ft_destroy: no next table, root_ft =
		// NULL, no command). This model reports neither and refuses it;
		// what silicon answers is UNCONFIRMED.
		// (underlay_qpn, input 0x18 bits 23:0, means nothing on an
		// Ethernet port either.)
		return stBadParam, uint32(opmod)
	case op == 0x930: // CREATE_FLOW_TABLE
		ls := bitsAt(in, 0x18, 7, 0)
		if ls > 16 {
			return stBadParam, ls
		}
		n := m.alloc()
		m.fts[n] = ls
		set32(out, 0x08, n)
		return stOK, 0
	}
	ls, ok := m.fts[tid]
	if !ok {
		return stBadResource, tid
	}
	switch op {
	case 0x931:
		// The root table may be destroyed: steering then has no root
		// (Linux fs_core.c update_root_ft_destroy, del_hw_flow_table).
		for _, g := range m.fgs {
			if g.table == tid {
				return stBusy, tid
			}
		}
		delete(m.fts, tid)
		if m.root == tid {
			m.root = 0
		}
		return stOK, 0
	case 0x92F: // SET_FLOW_TABLE_ROOT (op_mod 0)
		m.root = tid
		return stOK, 0
	case 0x933: // CREATE_FLOW_GROUP
		start, end := u32(in, 0x1C), u32(in, 0x24)
		if start > end || end >= 1<<ls {
			return stBadParam, end
		}
		if mc := bitsAt(in, 0x3C, 7, 0); mc != 0 {
			return stBadParam, mc // only wildcard groups are modelled
		}
		n := m.alloc()
		m.fgs[n] = fgroup{tid, start, end}
		set32(out, 0x08, n)
		return stOK, 0
	case 0x934:
		gid := bitsAt(in, 0x18, 23, 0)
		if g, ok := m.fgs[gid]; !ok || g.table != tid {
			return stBadResource, gid
		}
		for _, f := range m.ftes {
			if f.group == gid {
				return stBusy, gid
			}
		}
		delete(m.fgs, gid)
		return stOK, 0
	case 0x936: // SET_FLOW_TABLE_ENTRY
		idx := u32(in, 0x20)
		c := in[0x40:]
		gid := bitsAt(c, 0x04, 23, 0)
		g, ok := m.fgs[gid]
		if !ok || g.table != tid {
			return stBadResource, gid
		}
		if idx < g.start || idx > g.end {
			return stBadParam, idx
		}
		if a := u32(c, 0x0C); a != 4 {
			return stBadParam, a // forward to destination only
		}
		if n := bitsAt(c, 0x10, 23, 0); n != 1 {
			return stBadParam, n
		}
		if t := bitsAt(c, 0x300, 31, 24); t != 2 {
			return stBadParam, t // a TIR
		}
		tir := bitsAt(c, 0x300, 23, 0)
		if _, ok := m.tirs[tir]; !ok {
			return stBadResource, tir
		}
		m.ftes[[2]uint32{tid, idx}] = fte{gid, tir}
		return stOK, 0
	case 0x938:
		k := [2]uint32{tid, u32(in, 0x20)}
		if _, ok := m.ftes[k]; !ok {
			return stBadResource, k[1]
		}
		delete(m.ftes, k)
		return stOK, 0
	}
	return stBadOp, uint32(op)
}
