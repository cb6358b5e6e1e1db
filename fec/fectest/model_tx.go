package fectest

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/pkt"
)

type txBD struct {
	d   *[8]uint32
	ext uint32
}

// StepTx runs the asynchronous uDMA (Options.AsyncTx) one step: send one
// ready frame, or find none and start closing, or finish closing and clear
// TDAR. It reports whether TDAR was set.
func (m *Model) StepTx() bool {
	m.mu.Lock()
	active := m.get(fec.ENETx_TDAR) != 0
	switch {
	case !active || !m.enabled():
	case m.txHung || m.faults.TxStalled:
	case m.txState == txClosing:
		m.txState = txIdle
		m.set(fec.ENETx_TDAR, 0)
	default:
		m.processTx(1)
	}
	out, peer, loop := m.pending, m.peer, m.looped
	m.pending, m.looped = nil, nil
	m.mu.Unlock()
	if peer != nil {
		for _, f := range out {
			peer(f)
		}
	}
	m.loopBack(loop)
	return active
}

// txDone ends a walk of the ring: synchronously TDAR clears at once;
// asynchronously it stays set while the uDMA closes.
func (m *Model) txDone() {
	if m.opts.AsyncTx {
		m.txState = txClosing
		return
	}
	m.set(fec.ENETx_TDAR, 0)
}

// processTx walks the TX ring from the current descriptor while R is set,
// at most limit frames (0: no limit).
func (m *Model) processTx(limit int) {
	m.flushLagged()
	base := m.get(fec.ENETx_TDSR)
	enh := m.enhanced()
	frames := 0
	for {
		if m.busFault() {
			return
		}
		if limit > 0 && frames == limit {
			return
		}
		start := m.txIdx
		d, ok := m.desc(base, start)
		if !ok {
			m.set(fec.ENETx_TDAR, 0)
			return
		}
		if fec.TxStatus(load(&d[0])>>16)&fec.TX_R == 0 {
			m.txDone()
			return
		}
		if m.faults.ClearTDAREarly > 0 && frames == 1 {
			m.faults.ClearTDAREarly--
			m.set(fec.ENETx_TDAR, 0) // ready descriptors stranded
			return
		}
		// Gather until L.
		frame := m.txBuf[:0]
		bds := m.bds[:0]
		idx := start
		bad := false
		for {
			d, ok := m.desc(base, idx)
			if !ok {
				m.set(fec.ENETx_TDAR, 0)
				return
			}
			ls := load(&d[0])
			st := fec.TxStatus(ls >> 16)
			if st&fec.TX_R == 0 {
				m.violation("TX descriptor %d: R clear in the middle of a frame started at %d (partial frame published)", idx, start)
				m.set(fec.ENETx_TDAR, 0)
				return
			}
			n := int(ls & 0xFFFF)
			addr := load(&d[1])
			if a := m.opts.Caps.TxAlign; a > 1 && int(addr)%a != 0 {
				m.violation("TX descriptor %d: buffer %#x not %d-byte aligned (%s)", idx, addr, a, m.opts.Caps.Name)
				bad = true
			}
			if m.faults.SkipFragment > 0 && len(bds) == 1 {
				// The second descriptor's data is lost (Faults.SkipFragment).
				m.faults.SkipFragment--
				n = 0
			}
			frame = slices.Grow(frame, n)[:len(frame)+n]
			if n > 0 {
				if err := m.mem.DeviceRead(dma.Addr(addr), frame[len(frame)-n:]); err != nil {
					m.violation("TX descriptor %d: %v", idx, err)
					bad = true
				}
			}
			var ext uint32
			if enh {
				ext = load(&d[2])
			}
			bds = append(bds, txBD{d: d, ext: ext})
			next := idx + 1
			if st&fec.TX_W != 0 {
				next = 0
			}
			idx = next
			if st&fec.TX_L != 0 {
				break
			}
			if len(bds) > 4096 {
				m.violation("TX frame at %d: no L bit in 4096 descriptors", start)
				return
			}
		}
		m.txIdx = idx
		m.txBuf, m.bds = frame, bds
		frames++
		m.finishTx(frame, bds, bad)
	}
}

func (m *Model) finishTx(frame []byte, bds []txBD, bad bool) {
	enh := m.enhanced()
	opt := bds[0].ext & (fec.TXE_PINS | fec.TXE_IINS)
	for _, b := range bds[1:] {
		if b.ext&(fec.TXE_PINS|fec.TXE_IINS) != opt {
			m.violation("TX frame: PINS/IINS differ between its descriptors (which one silicon samples is unconfirmed)")
		}
	}
	if !enh {
		opt = 0
	}
	// TACC applies to every frame (22.5.33): SHIFT16 drops the first two
	// bytes, IPCHK/PROCHK insert checksums as IINS/PINS do.
	tacc := m.get(fec.ENETx_TACC)
	if tacc&fec.TACC_SHIFT16 != 0 {
		frame = frame[min(2, len(frame)):]
	}
	ip, l4 := opt&fec.TXE_IINS != 0 || tacc&fec.TACC_IPCHK != 0, opt&fec.TXE_PINS != 0 || tacc&fec.TACC_PROCHK != 0
	if ip || l4 {
		// The MAC can only insert a checksum computed over the whole frame,
		// which it holds only in store-and-forward mode; without STRFWD the
		// frame goes out with the fields as given.
		if m.get(fec.ENETx_TFWR)&fec.TFWR_STRFWD != 0 {
			insertChecksums(frame, ip, l4)
		} else {
			m.stats.CsumWithoutStrfwd++
		}
	}
	if len(frame) < 60 {
		m.violation("TX frame of %d bytes: runt on the wire (the driver must pad to 60)", len(frame))
	}
	var errw uint32
	if m.faults.TxErrorCount > 0 {
		m.faults.TxErrorCount--
		errw = m.faults.TxError & 0xFFFF
		bad = true
	}
	if bad && errw == 0 {
		errw = fec.TXE_TXE | fec.TXE_FE
	}
	var ev uint32
	for k, b := range bds {
		ls := load(&b.d[0])
		store(&b.d[0], ls&^(uint32(fec.TX_R)<<16))
		if enh {
			w2 := load(&b.d[2])
			if k == len(bds)-1 {
				w2 = b.ext&0xFFFF0000 | errw
			}
			var bev uint32
			if b.ext&fec.TXE_INT != 0 {
				bev |= fec.EIR_TXB
				if k == len(bds)-1 {
					bev |= fec.EIR_TXF
				}
			}
			if m.opts.LagBDU {
				m.lagged = append(m.lagged, lagged{d: b.d, w2: w2, ev: bev})
				continue
			}
			store(&b.d[2], w2)
			store(&b.d[4], fec.BDU)
			ev |= bev
		} else {
			ev |= fec.EIR_TXB
			if k == len(bds)-1 {
				ev |= fec.EIR_TXF
			}
		}
	}
	if maxfl := int(m.get(fec.ENETx_RCR)>>16) & 0x3FFF; len(frame)+4 > maxfl {
		ev |= fec.EIR_BABT
	}
	m.raise(ev)
	if bad {
		m.mibAdd("IEEE_T_MACERR", 1)
		return
	}
	m.stats.TxFrames++
	m.mibFrame(&mibTx, frame)
	if rcr := m.get(fec.ENETx_RCR); rcr&fec.RCR_LOOP != 0 && !m.opts.NoLoopback {
		// Internal loopback (IMX6ULLRM 22.5.10, RCR LOOP): the frame is
		// received, not sent. The manual has it as an MII loopback, so
		// MII_MODE set and RMII_MODE clear (UNCONFIRMED wording; the fact
		// sheet lists LOOP only); DRT (receive disabled while
		// transmitting, half duplex) would drop what is looped.
		switch {
		case rcr&fec.RCR_MII_MODE == 0 || rcr&(fec.RCR_RMII_MODE|fec.RCR_RGMII_EN) != 0:
			m.violation("TX frame looped with RCR %#x: internal loopback needs MII_MODE=1, RMII_MODE=0, RGMII_EN=0", rcr)
		case m.get(fec.ENETx_ECR)&fec.ECR_SPEED != 0:
			// 1000 Mb/s is RGMII only (Linux fec_restart sets ECR bit 5
			// beside RGMII_EN); an MII loopback runs at 10/100.
			m.violation("TX frame looped with ECR SPEED (1000 Mb/s) set: the MII loopback has no gigabit mode")
		case rcr&fec.RCR_DRT != 0:
			m.stats.LoopDropped++
		default:
			m.looped = append(m.looped, bytes.Clone(frame))
		}
		return
	}
	if m.phy.looped() && !m.opts.NoLoopback {
		// PHY loopback (IEEE 802.3 22.2.4.1.2): the PHY returns the frame
		// on the receive path and sends nothing on the medium. It runs at
		// the speed and duplex BMCR selects: a MAC programmed for another
		// mode is not understood and the frame is lost.
		if m.macLink() != m.phy.loopLink() {
			m.stats.LinkMismatch++
			return
		}
		if m.get(fec.ENETx_RCR)&fec.RCR_DRT != 0 {
			// The looped frame's RX_DV rises within 512 bit times of
			// TX_EN (IEEE 802.3 22.2.4.1.2), i.e. while the MAC still
			// transmits; DRT disables reception while transmitting
			// (IMX6ULLRM 22.5.10, RCR DRT): the frame is not received.
			m.stats.LoopDropped++
			return
		}
		m.looped = append(m.looped, bytes.Clone(frame))
		return
	}
	if m.peer != nil && m.wireOK() {
		m.pending = append(m.pending, bytes.Clone(frame))
	}
}

// insertChecksums does what PINS/IINS do: the IPv4 header checksum and the
// TCP/UDP checksum (pseudo-header included) computed over the fields as they
// are, so the driver must have zeroed them.
func insertChecksums(f []byte, ip, l4 bool) {
	h, err := pkt.Parse(f)
	if err != nil {
		return
	}
	if ip && !h.IPv6 {
		ihl := h.L4 - h.L3
		c := ^pkt.Fold(pkt.Sum(0, f[h.L3:h.L3+ihl]))
		binary.BigEndian.PutUint16(f[h.L3+10:], c)
	}
	if l4 && h.CsumOff >= 0 && h.IPEnd <= len(f) && h.IPEnd >= h.L4 {
		seg := f[h.L4:h.IPEnd]
		s := pkt.PseudoSum(f[h.L3:], h.IPv6, h.Proto, len(seg))
		c := ^pkt.Fold(pkt.Sum(s, seg))
		if c == 0 && h.Proto == pkt.ProtoUDP {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(f[h.CsumOff:], c)
	}
}
