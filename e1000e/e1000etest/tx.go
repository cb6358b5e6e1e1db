package e1000etest

import (
	"encoding/binary"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkttest"
)

// ProcessTX processes the TX descriptors between TDH and TDT (Options.ManualTX).
func (m *Model) ProcessTX() {
	m.mu.Lock()
	m.processTX()
	out, frames := m.out, m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, f := range frames {
		if out != nil {
			out(f)
		}
	}
}

func (m *Model) processTX() {
	if m.reg[rTCTL]&2 == 0 {
		return
	}
	n := uint32(m.ringLen(rTDLEN))
	if n == 0 {
		return
	}
	base := m.ringBase(rTDBAL)
	raised := false
	for m.reg[rTDH] != m.reg[rTDT] {
		h := m.reg[rTDH]
		if h >= n {
			m.violate("TDH %d outside the ring", h)
			return
		}
		dw := m.desc(base + dma.Addr(16*h))
		if dw == nil {
			return
		}
		var d [16]byte
		for i := range 4 {
			binary.LittleEndian.PutUint32(d[4*i:], load(&dw[i]))
		}
		if snap, ok := m.owned[h]; ok {
			delete(m.owned, h)
			if snap != [4]uint32{load(&dw[0]), load(&dw[1]), load(&dw[2]), load(&dw[3])} {
				m.violate("TX descriptor %d rewritten by the driver while the device owned it", h)
			}
		}
		m.st.TxDescs++
		w2 := binary.LittleEndian.Uint32(d[8:])
		w3 := binary.LittleEndian.Uint32(d[12:])
		dext := w2&(1<<29) != 0
		dtyp := w2 >> 20 & 0xF
		switch {
		case !dext:
			m.violate("legacy TX descriptor %d: not modelled", h)
		case dtyp == 0:
			m.context(d[:])
		case dtyp == 1:
			m.data(h, d[:])
		default:
			m.violate("TX descriptor %d: DTYP %d", h, dtyp)
		}
		if w2&(1<<27) != 0 { // RS: write back DD
			store(&dw[3], w3|1)
			raised = true
		}
		m.reg[rTDH] = (h + 1) % n
	}
	if raised {
		m.cause(intTXDW)
	}
}

func (m *Model) context(d []byte) {
	w0 := binary.LittleEndian.Uint32(d[0:])
	w1 := binary.LittleEndian.Uint32(d[4:])
	w2 := binary.LittleEndian.Uint32(d[8:])
	w3 := binary.LittleEndian.Uint32(d[12:])
	m.ctx = txCtx{valid: true,
		ipcss: int(w0 & 0xFF), ipcso: int(w0 >> 8 & 0xFF), ipcse: int(w0 >> 16),
		tucss: int(w1 & 0xFF), tucso: int(w1 >> 8 & 0xFF), tucse: int(w1 >> 16),
		paylen: int(w2 & 0xFFFFF), tse: w2&(1<<26) != 0, ip: w2&(1<<25) != 0, tcp: w2&(1<<24) != 0,
		hdrlen: int(w3 >> 8 & 0xFF), mss: int(w3 >> 16)}
	if m.ctx.tse && m.ctx.mss == 0 {
		m.violate("TSO context with MSS 0")
	}
}

func (m *Model) data(h uint32, d []byte) {
	addr := dma.Addr(binary.LittleEndian.Uint64(d[0:]))
	w2 := binary.LittleEndian.Uint32(d[8:])
	w3 := binary.LittleEndian.Uint32(d[12:])
	ln := int(w2 & 0xFFFFF)
	if len(m.gather) == 0 {
		m.ifcs = w2&(1<<25) != 0
	}
	m.ndata++
	if ln == 0 {
		m.violate("TX data descriptor %d with length 0", h)
	} else {
		b := make([]byte, ln)
		if !m.dmaRead(addr, b, "TX buffer") {
			m.gather, m.ndata, m.dataTSE = nil, 0, false
			return
		}
		m.staleLine(addr, b)
		if len(m.gather) == 0 {
			m.dataTSE = w2&(1<<26) != 0
			m.popts = w3 >> 8 & 0xFF
		}
		m.gather = append(m.gather, b...)
	}
	if w2&(1<<24) == 0 { // not EOP
		return
	}
	p, nd := m.gather, m.ndata
	m.gather, m.ndata = nil, 0
	m.st.TxPackets++
	m.st.TxMaxDataDescs = max(m.st.TxMaxDataDescs, nd)
	// QEMU's 82574L (hw/net/e1000e_core.c, the reference device) gathers
	// a packet into at most E1000E_MAX_TX_FRAGS = 64 fragments, one per
	// data descriptor (net_tx_pkt_add_raw_fragment); a packet with more
	// is dropped at EOP without a word or a counter.
	if nd > MaxTxFrags {
		m.violate("packet gathered from %d data descriptors: QEMU's e1000e takes at most %d (E1000E_MAX_TX_FRAGS) and drops it silently", nd, MaxTxFrags)
		return
	}
	// DCMD.IFCS (bit 25 of a data descriptor's dword 2): without it the
	// MAC appends no FCS and the frame leaves with its last four bytes
	// taken as the CRC, which the link partner drops as a CRC error
	// (82574 datasheet, transmit data descriptor DCMD; Linux e1000e
	// e1000_configure_tx sets E1000_TXD_CMD_IFCS in every descriptor's
	// txd_cmd).
	if !m.ifcs {
		m.violate("packet sent without DCMD.IFCS: no FCS is appended, the link partner drops it as a CRC error")
		return
	}
	switch {
	case m.dataTSE:
		if !m.ctx.valid || !m.ctx.tse {
			m.violate("TSO data descriptors without a TSO context")
			return
		}
		m.segment(p)
	default:
		if len(p) > 16<<10 {
			m.violate("%d-byte packet without TSO", len(p))
			return
		}
		if m.popts != 0 && (!m.ctx.valid || m.ctx.tse) {
			m.violate("checksum insertion (POPTS %#x) without a checksum context", m.popts)
			return
		}
		m.insert(p, p)
		m.emit(p)
	}
}

// insert computes the checksums POPTS asks for over f (the region [css,
// cse] of what is in memory, field included) and stores them.
func (m *Model) insert(f, _ []byte) {
	c := m.ctx
	if m.popts&1 != 0 {
		m.insertSum(f, "IP", c.ipcss, c.ipcso, c.ipcse)
	}
	if m.popts&2 != 0 {
		m.insertSum(f, "L4", c.tucss, c.tucso, c.tucse)
	}
}

// insertSum stores at cso of f the ones' complement of the sum of
// f[css:cse+1] (cse 0, or past the end: to the end of the frame), or
// reports a context whose fields lie outside the frame.
func (m *Model) insertSum(f []byte, what string, css, cso, cse int) {
	end := cse
	if end == 0 || end >= len(f) {
		end = len(f) - 1
	}
	if cso+2 > len(f) || css > end {
		m.violate("%s checksum fields %d/%d/%d outside a %d-byte frame", what, css, cso, cse, len(f))
		return
	}
	binary.BigEndian.PutUint16(f[cso:], ^pkttest.Fold(pkttest.Sum(0, f[css:end+1])))
}

// segment performs TCP segmentation of p under the TSO context (82574
// datasheet, TCP segmentation).
func (m *Model) segment(p []byte) {
	c := m.ctx
	m.st.TxTSO++
	m.stats[sTSCTC]++
	if c.hdrlen == 0 || c.hdrlen > len(p) {
		m.violate("TSO HDRLEN %d with %d bytes gathered", c.hdrlen, len(p))
		return
	}
	if pl := len(p) - c.hdrlen; pl != c.paylen {
		m.violate("TSO PAYLEN %d but %d payload bytes gathered", c.paylen, pl)
		return
	}
	if c.tucso+2 > c.hdrlen || c.tucss+20 > c.hdrlen || (c.ip && c.ipcss+20 > c.hdrlen) {
		m.violate("TSO context offsets outside the %d-byte header", c.hdrlen)
		return
	}
	hdr, pay := p[:c.hdrlen], p[c.hdrlen:]
	if m.opts.FragmentTSO && c.ip {
		m.fragmentTSO(p)
		return
	}
	id := binary.BigEndian.Uint16(hdr[c.ipcss+4:])
	seq := binary.BigEndian.Uint32(hdr[c.tucss+4:])
	flags := hdr[c.tucss+13]
	for i, off := 0, 0; off < len(pay); i++ {
		k := min(c.mss, len(pay)-off)
		f := make([]byte, c.hdrlen+k)
		copy(f, hdr)
		copy(f[c.hdrlen:], pay[off:off+k])
		last := off+k == len(pay)
		if c.ip {
			binary.BigEndian.PutUint16(f[c.ipcss+2:], uint16(c.hdrlen-c.ipcss+k))
			binary.BigEndian.PutUint16(f[c.ipcss+4:], id+uint16(i))
		} else {
			binary.BigEndian.PutUint16(f[c.ipcss+4:], uint16(c.hdrlen-c.ipcss-40+k))
		}
		binary.BigEndian.PutUint32(f[c.tucss+4:], seq+uint32(off))
		if !last {
			f[c.tucss+13] = flags &^ (0x01 | 0x08) // FIN, PSH
		}
		// Checksums are summed over what the driver left in the fields
		// (zero for IPv4, the pseudo-header seed without length for TCP),
		// as the silicon does; the segment's TCP length is added.
		if m.popts&1 != 0 {
			end := c.ipcse
			if end == 0 {
				end = c.tucss - 1
			}
			binary.BigEndian.PutUint16(f[c.ipcso:], ^pkttest.Fold(pkttest.Sum(0, f[c.ipcss:end+1])))
		}
		if m.popts&2 != 0 {
			l4 := f[c.tucss:]
			binary.BigEndian.PutUint16(f[c.tucso:], ^pkttest.Fold(pkttest.Sum(uint32(len(l4)), l4)))
		}
		m.emit(f)
		off += k
	}
}

// fragmentTSO is Options.FragmentTSO: p (headers and payload) as one
// IPv4 datagram with its TCP checksum, cut into fragments.
func (m *Model) fragmentTSO(p []byte) {
	c := m.ctx
	d := append([]byte(nil), p...)
	binary.BigEndian.PutUint16(d[c.ipcss+2:], uint16(len(d)-c.ipcss))
	l4 := d[c.tucss:]
	pseudo := pkttest.Sum(0, d[c.ipcss+12:c.ipcss+20]) + 6 + uint32(len(l4))
	binary.BigEndian.PutUint16(d[c.tucso:], 0)
	binary.BigEndian.PutUint16(d[c.tucso:], ^pkttest.Fold(pkttest.Sum(pseudo, l4)))
	piece := c.mss &^ 7
	ipl := d[c.tucss:] // the IP payload
	for off := 0; off < len(ipl); off += piece {
		k := min(piece, len(ipl)-off)
		f := append(append([]byte(nil), d[:c.tucss]...), ipl[off:off+k]...)
		ip := f[c.ipcss:]
		binary.BigEndian.PutUint16(ip[2:], uint16(c.tucss-c.ipcss+k))
		fo := uint16(off / 8)
		if off+k < len(ipl) {
			fo |= 0x2000 // MF
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ^pkttest.Fold(pkttest.Sum(0, ip[:c.tucss-c.ipcss])))
		m.emit(f)
	}
}

func (m *Model) emit(f []byte) {
	if len(f) < 60 && m.reg[rTCTL]&(1<<3) != 0 { // PSP: pad short packets
		f = append(f, make([]byte, 60-len(f))...)
	}
	m.st.TxFrames++
	m.stats[sGPTC]++
	m.stats[sTPT]++
	m.stats[sGOTCL] += uint64(len(f) + 4)
	if m.looping() {
		m.loop(f)
		return
	}
	m.pending = append(m.pending, f)
}

type txCtx struct {
	valid               bool
	ipcss, ipcso, ipcse int
	tucss, tucso, tucse int
	paylen, hdrlen, mss int
	tse, ip, tcp        bool
}
