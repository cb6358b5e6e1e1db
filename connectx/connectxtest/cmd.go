package connectxtest

import (
	"encoding/binary"

	"github.com/tamanic/tamanic/dma"
)

// Offsets of struct mlx5_cmd_layout (device.h: type, rsvd0[3], inlen,
// in_ptr, in[4], out[4], out_ptr, outlen, token, sig, rsvd1, status_own)
// and mlx5_cmd_prot_block (data[512], rsvd0[48], next, block_num, rsvd1,
// token, ctrl_sig, sig). Delivery status is status_own >> 1, owner bit 0
// (cmd.c: ent->status = lay->status_own >> 1; CMD_OWNER_HW 1).
const (
	lyType, lyInLen, lyInPtr, lyIn, lyOut = 0x00, 0x04, 0x08, 0x10, 0x20
	lyOutPtr, lyOutLen, lyToken, lyStOwn  = 0x30, 0x38, 0x3C, 0x3F
	pbData, pbNext, pbBlock, pbToken      = 0x000, 0x230, 0x238, 0x23D
	pbSize                                = 0x240
)

func u32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func u64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }
func bitsAt(b []byte, off int, hi, lo uint) uint32 {
	return (u32(b, off) >> lo) & (1<<(hi-lo+1) - 1)
}
func set32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }

// doorbell runs the command slots rung in v.
func (m *Model) doorbell(v uint32) {
	if !m.cmdReady {
		m.violation("command doorbell before the command queue address was set")
		return
	}
	if m.polls > 0 {
		m.violation("command doorbell while the firmware is still initializing")
		return
	}
	for slot := 0; slot < 32; slot++ {
		if v&(1<<slot) != 0 {
			m.command(slot)
		}
	}
}

// chain reads (or validates, when data is nil) a mailbox chain of n blocks
// starting at ptr with the entry's token; it returns a delivery status.
func (m *Model) chain(ptr uint64, n int, token uint8, data []byte, bad uint8) (addrs []uint64, ds uint8) {
	var blk [pbSize]byte
	for i := 0; i < n; i++ {
		if ptr == 0 || ptr%1024 != 0 {
			// Linux takes mailboxes from a dma_pool of
			// sizeof(struct mlx5_cmd_prot_block) = 0x240 bytes aligned to
			// roundup_pow_of_two(0x240) = 1 KiB (cmd.c mlx5_cmd_init), so
			// the firmware accepts 1 KiB; Snabb saw 0x240-aligned blocks
			// rejected. A coarser rule (4 KiB, as before) would refuse
			// what the silicon takes. Delivery status 4/5 is
			// MLX5_CMD_DELIVERY_STAT_OUT/IN_PTR_ALIGN_ERR.
			return nil, bad
		}
		if m.mem.DeviceRead(dma.Addr(ptr), blk[:]) != nil {
			return nil, bad
		}
		if u32(blk[:], pbBlock) != uint32(i) {
			return nil, dsBlockNum
		}
		if blk[pbToken] != token {
			return nil, dsToken
		}
		for _, b := range blk[0x200:0x230] {
			if b != 0 {
				return nil, dsResNotClr // mlx5_cmd_prot_block rsvd0
			}
		}
		if blk[0x23C] != 0 {
			return nil, dsResNotClr
		}
		if data != nil {
			copy(data[16+i*512:], blk[:512])
		}
		addrs = append(addrs, ptr)
		ptr = u64(blk[:], pbNext)
	}
	return addrs, 0
}

func mailboxes(n int) int {
	if n <= 16 {
		return 0
	}
	return (n - 16 + 511) / 512
}

// command executes one command queue slot.
func (m *Model) command(slot int) {
	if !m.busMaster() {
		return // the card cannot read the entry: the driver waits forever
	}
	if m.faults.StallAfter > 0 && m.stats.Commands >= m.faults.StallAfter {
		return
	}
	a := m.cmdq + uint64(slot)*64
	var e [64]byte
	if err := m.mem.DeviceRead(dma.Addr(a), e[:]); err != nil {
		m.violation("command entry at %#x unreadable: %v", a, err)
		return
	}
	if e[lyStOwn]&1 == 0 {
		m.violation("command doorbell for slot %d, which software still owns", slot)
		return
	}
	m.stats.Commands++
	token := e[lyToken]
	inLen, outLen := int(u32(e[:], lyInLen)), int(u32(e[:], lyOutLen))
	finish := func(ds uint8) {
		m.stats.Delivery += int(min(ds, 1))
		st := e[60:64:64]
		st[3] = ds << 1 // owner back to software
		if w := m.coherent(a+60, 4); w != nil {
			if ds != 0 {
				_ = m.mem.DeviceWrite(dma.Addr(a), e[:60])
			}
			atomicStoreBytes(w, st)
		}
	}
	if e[lyType] != 0x07 {
		finish(dsBadType)
		return
	}
	if e[1]|e[2]|e[3]|e[0x3E] != 0 {
		finish(dsResNotClr) // mlx5_cmd_layout rsvd0, rsvd1
		return
	}
	if inLen < 8 || inLen > 16+64*512 {
		finish(dsInLen)
		return
	}
	if outLen < 8 || outLen > 16+64*512 {
		finish(dsOutLen)
		return
	}
	in := make([]byte, 16+mailboxes(inLen)*512)
	copy(in, e[lyIn:lyIn+16])
	if _, ds := m.chain(u64(e[:], lyInPtr), mailboxes(inLen), token, in, dsInPtr); ds != 0 {
		finish(ds)
		return
	}
	outBlocks, ds := m.chain(u64(e[:], lyOutPtr), mailboxes(outLen), token, nil, dsOutPtr)
	if ds != 0 {
		finish(ds)
		return
	}
	in = in[:inLen]
	out := make([]byte, max(16, outLen)+16+mailboxes(outLen)*512)
	op := uint16(u32(in, 0) >> 16)
	var st uint8
	var synd uint32
	if m.faults.FailOp != 0 && op == m.faults.FailOp {
		st, synd = m.faults.FailStatus, 0xBAD // refused before taking effect
	} else {
		st, synd = m.execute(op, uint16(u32(in, 4)), in, out[:max(outLen, 16)])
	}
	if st != stOK {
		m.stats.CmdFailed++
		clear(out)
	}
	out[0] = st
	set32(out, 4, synd)
	copy(e[lyOut:lyOut+16], out[:16])
	if err := m.mem.DeviceWrite(dma.Addr(a), e[:60]); err != nil {
		m.violation("command entry write: %v", err)
	}
	for i, ba := range outBlocks {
		if err := m.mem.DeviceWrite(dma.Addr(ba), out[16+i*512:16+(i+1)*512]); err != nil {
			m.violation("output mailbox write: %v", err)
		}
	}
	finish(0)
}

// Minimum input and output lengths per opcode (mlx5_ifc *_in/_out sizes as
// far as the model reads or writes them).
var minLen = map[uint16][2]int{
	0x100: {0x10, 0x1010}, 0x102: {0x10, 0x10}, 0x103: {0x10, 0x10}, 0x104: {0x10, 0x10},
	0x105: {0x10, 0x10}, 0x107: {0x10, 0x10}, 0x108: {0x10, 0x10}, 0x10A: {0x10, 0x70},
	0x10B: {0x10, 0x10}, 0x203: {0x10, 0x10}, 0x301: {0x118, 0x10}, 0x302: {0x10, 0x10},
	0x400: {0x118, 0x10}, 0x401: {0x10, 0x10}, 0x750: {0x10, 0x10}, 0x754: {0x10, 0x110},
	0x755: {0x200, 0x10}, 0x800: {0x10, 0x10}, 0x801: {0x10, 0x10}, 0x802: {0x10, 0x10},
	0x803: {0x10, 0x10}, 0x816: {0x10, 0x10}, 0x817: {0x10, 0x10}, 0x900: {0x110, 0x10},
	0x901: {0x110, 0x10}, 0x902: {0x10, 0x10}, 0x904: {0x118, 0x10}, 0x905: {0x110, 0x10}, 0x906: {0x10, 0x10},
	0x908: {0x118, 0x10}, 0x909: {0x110, 0x10}, 0x90A: {0x10, 0x10}, 0x90B: {0x10, 0x24}, 0x912: {0xC0, 0x10},
	0x914: {0x10, 0x10}, 0x92F: {0x40, 0x10}, 0x930: {0x40, 0x10}, 0x931: {0x40, 0x10},
	0x805: {0x20, 0x20}, 0x933: {0x400, 0x10}, 0x934: {0x40, 0x10}, 0x936: {0x348, 0x10}, 0x938: {0x40, 0x10},
}

// exactLen are the input lengths Linux gives fixed-size commands
// (MLX5_ST_SZ_BYTES of the mlx5_ifc.h *_in structure), checked field by
// field: create_tir_in is a 0x20-byte header and a 0xF0-byte tirc
// (tirc_bits ends with reserved_at_2c0[0x4c0]). Firmware's answer to a
// longer input is UNCONFIRMED, so the model executes it and reports a
// violation.
var exactLen = map[uint16]int{0x900: 0x110, 0x901: 0x110}

func (m *Model) alloc() uint32 { m.next++; return m.next }

// execute runs a command; out has the output length the driver gave.
func (m *Model) execute(op, opmod uint16, in, out []byte) (uint8, uint32) {
	l, ok := minLen[op]
	if !ok {
		return stBadOp, uint32(op)
	}
	if len(in) < l[0] {
		return stBadInLen, uint32(l[0])
	}
	if n, ok := exactLen[op]; ok && len(in) != n {
		m.violation("command %#x input of %#x bytes, mlx5_ifc.h says %#x", op, len(in), n)
	}
	if len(out) < l[1] {
		return stBadOutLen, uint32(l[1])
	}
	if op != 0x104 && !m.enabled {
		return stBadSysState, 0x104
	}
	switch op {
	case 0x104: // ENABLE_HCA
		if m.enabled {
			return stBadSysState, 1
		}
		m.enabled = true
		m.need = m.opts.BootPages
		return stOK, 0
	case 0x105: // DISABLE_HCA
		if m.inited && !m.torn {
			return stBadSysState, 2
		}
		m.reset()
		return stOK, 0
	case 0x10A: // QUERY_ISSI
		set32(out, 0x08, 0)
		set32(out, 0x6C, 0x3) // ISSI 0 and 1
		return stOK, 0
	case 0x10B: // SET_ISSI
		if m.inited {
			return stBadSysState, 3
		}
		if v := bitsAt(in, 0x08, 15, 0); v > 1 {
			return stBadParam, v
		}
		m.issiSet = true
		return stOK, 0
	case 0x107: // QUERY_PAGES
		want := 0
		switch opmod {
		case 1:
			want = m.opts.BootPages
		case 2:
			want = m.opts.BootPages + m.opts.InitPages
		case 3:
			if !m.inited {
				return stBadSysState, 4
			}
			want = m.need
		default:
			return stBadParam, uint32(opmod)
		}
		if opmod < 3 && m.need < want {
			m.need = want
		}
		set32(out, 0x0C, uint32(int32(want-len(m.pages))))
		return stOK, 0
	case 0x108:
		return m.managePages(opmod, in, out)
	case 0x100: // QUERY_HCA_CAP
		if len(m.pages) < m.opts.BootPages {
			return stBadSysState, 5
		}
		c := out[0x10:]
		switch opmod >> 1 {
		case 0:
			set32(c, 0x34, 1<<8) // port_type Ethernet
			set32(c, 0x40, 1<<3) // eth_net_offloads
			// max_wqe_sz_sq: mlx5_ifc.h cmd_hca_cap bits 0x290..0x29F.
			set32(c, 0x50, uint32(m.opts.MaxWQESzSQ)&0xFFFF)
			// disable_local_lb_uc, disable_local_lb_mc: cmd_hca_cap bits
			// 0x3E1 and 0x3E2 (loopback.go).
			set32(c, 0x7C, m.lbCaps())
		case 1:
			set32(c, 0, 1<<31|uint32(m.opts.MaxLSOLog)<<16|m.opts.wqeInlineCap()<<12)
		default:
			return stBadParam, uint32(opmod)
		}
		return stOK, 0
	case 0x102: // INIT_HCA
		if m.inited {
			return stBadSysState, 6
		}
		if len(m.pages) < m.opts.BootPages+m.opts.InitPages {
			return stBadSysState, 7
		}
		m.inited = true
		m.need = m.opts.BootPages + m.opts.InitPages + m.opts.RegularPages
		return stOK, 0
	case 0x103: // TEARDOWN_HCA
		if !m.inited || m.torn {
			return stBadSysState, 8
		}
		m.torn = true
		m.need = 0
		return stOK, 0
	}
	if !m.inited || m.torn {
		return stBadSysState, 9
	}
	return m.object(op, opmod, in, out)
}

func (m *Model) managePages(opmod uint16, in, out []byte) (uint8, uint32) {
	n := int(u32(in, 0x0C))
	switch opmod {
	case 0:
		// MLX5_PAGES_CANT_GIVE: the driver will not give the pages a
		// request asked for (Linux page_notify_fail: function_id set, no
		// page list). This model is function 0; the firmware makes do with
		// what it holds.
		if fn := binary.BigEndian.Uint16(in[0x0A:]); fn != 0 {
			return stBadParam, uint32(fn)
		}
		m.need = min(m.need, len(m.pages))
		m.stats.PagesCantGive++
		return stOK, 0
	case 1:
		if len(in) < 0x10+8*n {
			return stBadInLen, uint32(n)
		}
		var pattern [64]byte
		for i := range pattern {
			pattern[i] = 0xA5
		}
		for i := 0; i < n; i++ {
			a := u64(in, 0x10+8*i)
			if a%4096 != 0 || m.pages[a] {
				return stBadParam, uint32(i)
			}
			// The firmware uses its pages: a page the driver did not hand
			// over (or cannot be reached) is caught by the DMA model.
			if err := m.mem.DeviceWrite(dma.Addr(a), pattern[:]); err != nil {
				return stBadParam, uint32(i)
			}
		}
		for i := 0; i < n; i++ {
			m.pages[u64(in, 0x10+8*i)] = true
		}
		m.stats.PagesGiven += n
		return stOK, 0
	case 2:
		if len(out) < 0x10+8*n {
			return stBadOutLen, uint32(n)
		}
		// Before INIT_HCA and after TEARDOWN_HCA every page may go back
		// (Linux reclaims startup pages on a failed start); in between, only
		// what exceeds the firmware's need.
		keep := 0
		if m.inited && !m.torn {
			keep = m.need
		}
		k := 0
		for a := range m.pages {
			if k == n || len(m.pages) <= keep {
				break
			}
			set64(out, 0x10+8*k, a)
			delete(m.pages, a)
			k++
		}
		set32(out, 0x08, uint32(k))
		m.stats.PagesReturned += k
		return stOK, 0
	}
	return stBadParam, uint32(opmod)
}

func set64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }
