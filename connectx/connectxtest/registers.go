package connectxtest

// accessRegister serves ACCESS_REGISTER (mlx5_ifc.h access_register_in:
// op_mod 0 write, 1 read (Linux mlx5_core_access_reg: op_mod = !write);
// register_id at 0x08 bits 15:0; register data from 0x10 in and out) for
// PMTU, register 0x5003 (MLX5_REG_PMTU; pmtu_reg: local_port at +0x00
// bits 23:16, max_mtu +0x04, admin_mtu +0x08, oper_mtu +0x0C, each bits
// 31:16, hardware MTUs with the FCS). Linux writes admin_mtu for port 1
// (mlx5_set_port_mtu) and reads max_mtu and oper_mtu
// (mlx5_query_port_max_mtu, mlx5_query_port_oper_mtu).
func (m *Model) accessRegister(opmod uint16, in, out []byte) (uint8, uint32) {
	id := bitsAt(in, 0x08, 15, 0)
	if id == 0x5006 {
		return m.paos(opmod, in, out)
	}
	if id != 0x5003 {
		return stBadParam, id // only PMTU and PAOS are modelled
	}
	r := in[0x10:]
	if p := bitsAt(r, 0x00, 23, 16); p != 1 {
		return stBadParam, p // one port
	}
	switch opmod {
	case 0:
		admin := bitsAt(r, 0x08, 31, 16)
		if admin < 68 || admin > uint32(m.opts.PortMaxMTU) {
			return stBadParam, admin
		}
		m.portMTU = admin
	case 1:
	default:
		return stBadParam, uint32(opmod)
	}
	o := out[0x10:]
	oper := uint32(defaultPortMTU)
	if m.portMTU != 0 {
		oper = m.portMTU
	}
	set32(o, 0x00, 1<<16)
	set32(o, 0x04, uint32(m.opts.PortMaxMTU)<<16)
	set32(o, 0x08, m.portMTU<<16)
	set32(o, 0x0C, oper<<16)
	return stOK, 0
}

// paos serves the PAOS register (Port Administrative and Operational
// Status, register id 0x5006, Linux MLX5_REG_PAOS; mlx5_ifc.h
// mlx5_ifc_paos_reg_bits, 16 bytes: swid 31:24, local_port 23:16,
// admin_status 11:8, oper_status 3:0 of the first dword; ase bit 31 and
// ee bit 30 of the second). admin_status is 1 UP or 2 DOWN (Linux enum
// mlx5_port_status); a write changes it only with ase (admin status
// enable) set, as Linux's mlx5_set_port_admin_status sets ase with it.
// oper_status reads 1 up, 2 down. The port passes traffic and reports
// itself up (QUERY_VPORT_STATE, port-change events) only while admin
// status is UP: Linux sets it UP at open (en_main.c mlx5e_open) and DOWN
// at close (mlx5e_close). The model starts it DOWN; what a card's reset
// leaves there is UNCONFIRMED.
func (m *Model) paos(opmod uint16, in, out []byte) (uint8, uint32) {
	if len(in) < 0x20 || len(out) < 0x20 {
		return stBadInLen, 0x20
	}
	r := in[0x10:]
	if p := bitsAt(r, 0x00, 23, 16); p != 1 {
		return stBadParam, p // one port
	}
	switch opmod {
	case 0:
		if bitsAt(r, 0x04, 31, 31) == 1 {
			var up bool
			switch a := bitsAt(r, 0x00, 11, 8); a {
			case 1:
				up = true
			case 2:
			default:
				return stBadParam, a
			}
			was := m.portUp()
			m.adminUp = up
			if m.portUp() != was {
				m.portChange()
			}
		}
	case 1:
	default:
		return stBadParam, uint32(opmod)
	}
	admin, oper := uint32(2), uint32(2)
	if m.adminUp {
		admin = 1
	}
	if m.portUp() {
		oper = 1
	}
	set32(out[0x10:], 0x00, 1<<16|admin<<8|oper)
	return stOK, 0
}
