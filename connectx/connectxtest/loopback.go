package connectxtest

// Local loopback of a NIC vport, as the sources give it. The rule is
// written from Linux and the mlx5_ifc.h layouts, not from the driver:
//
//   - A frame the vport transmits comes back to the vport's own receive
//     path ("local loopback") when the NIC vport context allows it:
//     disable_uc_local_lb (nic_vport_context dword 0 bit 1) for unicast,
//     disable_mc_local_lb (bit 2) for multicast and broadcast. Linux's
//     loopback self-test (en_selftest.c mlx5e_test_loopback_setup) turns
//     both off for the test when QUERY_NIC_VPORT_CONTEXT says they are on
//     (vport.c mlx5_nic_vport_query_local_lb, then
//     mlx5_nic_vport_update_local_lb(mdev, true), which writes
//     disable_{uc,mc}_local_lb = 0 with field_select bits 11 and 10, each
//     only when cmd_hca_cap disable_local_lb_uc / _mc, bits 0x3E1 and
//     0x3E2, say the firmware lets it be changed; without either it sends
//     nothing: the loopback cannot be turned off, it is always on). The
//     self-test's frame is unicast to the netdev's own address
//     (mlx5e_test_get_udp_skb: h_dest = dev_addr), so a unicast frame
//     loops when its destination is the vport's MAC.
//   - A looped frame is then steered like a received one (flow table,
//     TIR, RQ). When the TIR and the sending SQ's TIS are in the same
//     transport domain it is "self loopback", which the TIR blocks unless
//     its self_lb_block field (tirc dword 9, bits 25:24; bit 0 unicast,
//     bit 1 multicast; MODIFY_TIR bitmask self_lb_en, bit 4 of the 64-bit
//     modify_bitmask) has the bit set: despite the field's name, setting
//     the bit is what lets the frames through. Every user of it reads it
//     so: the self-test sets MLX5_TIRC_SELF_LB_BLOCK_BLOCK_UNICAST for its
//     duration (mlx5e_refresh_tirs(priv, true, false)) and clears it
//     after; the commit that added the refresh (66189961e986, "Added self
//     loopback prevention") writes self_lb_en with the field 0 to keep
//     multicast from looping back to the sender's own RQs; mlx5_ib maps
//     its ALLOW_SELF_LB_UC/MC flags onto these bits (qp.c
//     create_raw_packet_qp_tir, "allow a QP to be able to receive loopback
//     traffic"); DPDK's mlx5 sets the unicast bit for its loopback mode
//     (lpbk_mode).
//
// What the sources do not say, and the model chooses (UNCONFIRMED on
// silicon): a unicast frame that loops does not also go to the wire (one
// that does not loop, the vport's local loopback being off, does);
// multicast goes to the wire and, if allowed, loops too; the loopback
// needs neither the link nor the port's admin status; the firmware's
// default for disable_*_local_lb is "disabled" unless
// Options.LocalLoopback (Linux does not assume either: it asks); the
// 2015 commit's remark that a TIR must be refreshed after new SQs are
// created (the firmware taking its decision at MODIFY_TIR time) is not
// modelled: the TIR's bits are read for every frame.

// Bits of the layouts above.
const (
	vportDisableMC  = 1 << 2  // nic_vport_context dword 0
	vportDisableUC  = 1 << 1  // nic_vport_context dword 0
	fsDisableUC     = 1 << 11 // modify_nic_vport_field_select
	fsDisableMC     = 1 << 10
	capDisableLBUC  = 1 << 30 // cmd_hca_cap byte 0x7C (bit 0x3E1)
	capDisableLBMC  = 1 << 29 // cmd_hca_cap byte 0x7C (bit 0x3E2)
	tirSelfLBUC     = 1       // tirc self_lb_block bit 0
	tirSelfLBMC     = 2       // tirc self_lb_block bit 1
	modifyTIRSelfLB = 1 << 4  // modify_tir_in modify_bitmask (dword 0x14)
)

// lbCaps is the cmd_hca_cap word at 0x7C the model reports.
func (m *Model) lbCaps() uint32 {
	if m.opts.NoLocalLBCap {
		return 0
	}
	return capDisableLBUC | capDisableLBMC
}

// modifyTIR is MODIFY_TIR (0x901; mlx5_ifc.h modify_tir_in: tirn at 0x08
// bits 23:0, modify_bitmask at 0x10, tirc at 0x20). Only self_lb_en is
// modelled: any other bit is refused.
func (m *Model) modifyTIR(in []byte) (uint8, uint32) {
	id := bitsAt(in, 0x08, 23, 0)
	if _, ok := m.tirs[id]; !ok {
		return stBadResource, id
	}
	if hi, lo := u32(in, 0x10), u32(in, 0x14); hi != 0 || lo&^modifyTIRSelfLB != 0 {
		return stBadParam, lo
	}
	if u32(in, 0x14)&modifyTIRSelfLB != 0 {
		m.tirLB[id] = uint8(bitsAt(in, 0x20+0x24, 25, 24))
	}
	return stOK, 0
}

// emit sends transmitted frame f: to the wire, back to the vport (local
// loopback), or both, as the rule above says.
func (m *Model) emit(f []byte) {
	if len(f) < 60 {
		f = append(f, make([]byte, 60-len(f))...) // the MAC pads runts
	}
	mc := f[0]&1 != 0
	loop, wire := false, true
	switch {
	case mc:
		loop = m.vportLB&vportDisableMC == 0
	case [6]byte(f[:6]) == m.opts.MAC:
		loop = m.vportLB&vportDisableUC == 0
		wire = !loop
	}
	if loop {
		kind := uint8(tirSelfLBUC)
		if mc {
			kind = tirSelfLBMC
		}
		m.stats.TxLoopback++
		m.deliverLocked(append([]byte(nil), f...), true, kind)
	}
	if !wire {
		return
	}
	if !m.adminUp {
		// PAOS admin status down: the port sends nothing (the WQE still
		// completes; the frame never reaches the wire).
		m.stats.TxPortDown++
		return
	}
	m.stats.TxFrames++
	m.stats.TxBytes += len(f)
	m.out = append(m.out, f)
}

// LocalLoopback reports the vport's local loopback (unicast, multicast:
// true when on, disable_*_local_lb clear) and the self_lb_block bits of
// every TIR.
func (m *Model) LocalLoopback() (uc, mc bool, tirs map[uint32]uint8) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tirs = map[uint32]uint8{}
	for k, v := range m.tirLB {
		tirs[k] = v
	}
	return m.vportLB&vportDisableUC == 0, m.vportLB&vportDisableMC == 0, tirs
}
