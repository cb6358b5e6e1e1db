package connectxtest

import (
	"encoding/binary"
	"math/bits"
)

// ConfigSpace returns the function's PCI configuration space.
func (m *Model) ConfigSpace() *ConfigSpace { return (*ConfigSpace)(m) }

// ConfigSpace is the configuration-space view of a Model (mmio.Regs).
type ConfigSpace Model

// Read32 implements mmio.Regs.
func (c *ConfigSpace) Read32(off uint32) uint32 {
	m := (*Model)(c)
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= 64 || off%4 != 0 {
		return 0xFFFFFFFF
	}
	return m.cfg[off/4]
}

// Write32 implements mmio.Regs: only the command register is writable.
func (c *ConfigSpace) Write32(off, v uint32) {
	m := (*Model)(c)
	m.mu.Lock()
	defer m.mu.Unlock()
	if off == 4 {
		m.cfg[1] = v & 0x7
	}
}

func (m *Model) busMaster() bool { return m.cfg[1]&4 != 0 }

// Read32 implements mmio.Regs for BAR0: a little-endian CPU's 32-bit load of
// big-endian registers.
func (m *Model) Read32(off uint32) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off%4 != 0 || off+4 > barSize {
		m.violation("BAR0 read at %#x", off)
		return 0xFFFFFFFF
	}
	var v uint32
	switch off {
	case 0x000:
		v = 32<<16 | 14 // fw 14.32
	case 0x004:
		v = 5<<16 | 1000
	case 0x014:
		v = uint32(m.cmdq)&^0xFFF | 5<<4 | 6 // 32 entries of 64 bytes
	case 0x010:
		v = uint32(m.cmdq >> 32)
	case 0x1FC:
		if m.faults.NeverReady || m.polls > 0 {
			if m.polls > 0 {
				m.polls--
			}
			v = 1 << 31
		}
	case 0x1010:
		m.health++
		v = m.health
	default:
		v = binary.BigEndian.Uint32(m.bar[off:])
	}
	return bits.ReverseBytes32(v)
}

// Write32 implements mmio.Regs for BAR0 (a little-endian CPU's 32-bit
// store: the bytes land in memory order).
func (m *Model) Write32(off, v uint32) {
	m.mu.Lock()
	prev := m.lastBAR
	m.lastBAR = off
	be := bits.ReverseBytes32(v)
	switch {
	case off%4 != 0 || off+4 > barSize:
		m.violation("BAR0 write at %#x", off)
	case off == 0x10:
		m.hSet = true
		m.cmdq = uint64(be)<<32 | m.cmdq&0xFFFFFFFF
	case off == 0x14:
		if !m.hSet {
			m.violation("cmdq_addr_l_sz written before cmdq_addr_h")
		}
		if be&0xF00 != 0 {
			m.violation("nic_interface %d requested; the model only offers the full driver interface", be>>8&7)
		}
		if be&0xFFF&^0xF00 != 0 {
			m.violation("command queue address low bits %#x not zero", be&0xFF)
		}
		m.cmdq = m.cmdq&^0xFFFFFFFF | uint64(be&^0xFFF)
		m.cmdReady = true
		m.polls = m.opts.InitPolls
	case off == 0x18 && m.faults.HoldCmd:
		m.heldCmd |= be
	case off == 0x18:
		m.doorbell(be)
	case off < 4096:
		m.violation("write %#x to read-only init segment offset %#x", be, off)
	default:
		m.uarWrite(off, prev, v)
	}
	out := m.out
	m.out = nil
	peer := m.peer
	m.mu.Unlock()
	for _, f := range out {
		if peer != nil {
			peer(f)
		}
	}
}

// uarWrite decodes a UAR page (Linux): the SQ doorbell is a 64-bit store
// of the control segment's first 8 bytes, unswapped, at MLX5_BF_OFFSET
// 0x800, alternating with 0x900 (bfreg offset ^= buf_size 0x100;
// mlx5e_notify_hw, mlx5_write64); the CQ arm doorbell is at
// MLX5_CQ_DOORBELL 0x20; the EQ consumer index (eqn << 24 | ci, big
// endian) at MLX5_EQ_DOORBEL_OFFSET 0x40 to arm, +8 (0x48) without arming
// (eq.c eq_update_ci). Doorbell records: SQ counter in dword
// MLX5_SND_DBR 1, RQ in MLX5_RCV_DBR 0, CQ consumer index (24 bits) in
// dword 0 (mlx5_cq_set_ci); owner bits as mlx5_cqwq_get_cqe and
// next_eqe_sw expect: valid when owner == (counter >> log_size) & 1.
func (m *Model) uarWrite(off, prev, v uint32) {
	page, po := off/4096, off%4096
	binary.LittleEndian.PutUint32(m.bar[off:], v)
	if !m.uars[page] {
		m.violation("UAR write to page %d, not allocated", page)
		return
	}
	switch po {
	case 0x800, 0x900:
	case 0x804, 0x904:
		if prev != off-4 {
			m.violation("UAR %d doorbell: second half written without the first just before it (last write %#x)", page, prev)
			return
		}
		m.stats.Doorbells++
		db := append([]byte(nil), m.bar[off-4:off+4]...)
		sqn := binary.BigEndian.Uint32(db[4:]) >> 8
		sq := m.sqs[sqn]
		if sq == nil || sq.uar != page {
			m.violation("doorbell on UAR %d for SQ %#x that is not bound to it", page, sqn)
			return
		}
		if m.faults.HoldTx {
			if m.held == nil {
				m.held = map[uint32][]byte{}
			}
			m.held[sqn] = db
			return
		}
		m.processSQ(sqn, sq, db)
	case 0x48, 0x40:
		w := bits.ReverseBytes32(v)
		if e := m.eqs[w>>24]; e != nil && e.uar == page {
			e.ci = w & 0xFFFFFF
		} else {
			m.violation("EQ doorbell %#x names no EQ of UAR %d", w, page)
		}
	case 0x20, 0x24:
		// CQ arm: the model raises no interrupts, Activity stands for them.
	default:
		m.violation("UAR %d write at unknown offset %#x", page, po)
	}
}
