package fectest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/pkt"
)

// MAC returns the station address programmed into PALR/PAUR.
func (m *Model) MAC() [6]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mac()
}

func (m *Model) mac() [6]byte {
	l, u := m.get(fec.ENETx_PALR), m.get(fec.ENETx_PAUR)
	return [6]byte{byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l), byte(u >> 24), byte(u >> 16)}
}

// accept applies the MAC's address filter (22.6.3 "Ethernet address
// recognition", IMX6ULLRM).
func (m *Model) accept(f []byte) bool {
	rcr := m.get(fec.ENETx_RCR)
	if rcr&fec.RCR_PROM != 0 {
		return true
	}
	var da [6]byte
	copy(da[:], f)
	if da == [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF} {
		return rcr&fec.RCR_BC_REJ == 0
	}
	if da == m.mac() {
		return true
	}
	i := hashIndex(da)
	hi, lo := fec.ENETx_IAUR, fec.ENETx_IALR
	if da[0]&1 != 0 {
		hi, lo = fec.ENETx_GAUR, fec.ENETx_GALR
	}
	if i >= 32 {
		return m.get(uint32(hi))>>(i-32)&1 != 0
	}
	return m.get(uint32(lo))>>i&1 != 0
}

// hashIndex is the MAC's hash: the 6 most significant bits of the CRC-32 of
// the address, computed bit by bit (deliberately not the driver's code).
func hashIndex(a [6]byte) int {
	crc := uint32(0xFFFFFFFF)
	for _, b := range a {
		for k := 0; k < 8; k++ {
			if (crc^uint32(b>>k))&1 != 0 {
				crc = crc>>1 ^ 0xEDB88320
			} else {
				crc >>= 1
			}
		}
	}
	return int(crc >> 26)
}

// rxEntry is a received frame on its way to a descriptor.
type rxEntry struct {
	data   []byte // buffer content: SHIFT16 pad, frame, FCS (truncated at FTRL)
	frame  []byte // the frame as received, for the MIB counters
	st     fec.RxStatus
	e0, e1 uint32
	crcErr bool
}

// Deliver is a frame (without FCS) arriving from the wire, with an optional
// injected fault. The frame goes to the next empty descriptor, or waits in
// the RX FIFO while there is none (RDAR clear or the ring full) and is
// written when the driver writes RDAR; a frame that does not fit in the
// FIFO is lost (IEEE_R_MACERR) and the next descriptor reports OV. It
// reports whether the frame was accepted (written or held).
func (m *Model) Deliver(frame []byte, fault RxFault) bool {
	return m.deliver(frame, fault, false)
}

// deliver receives frame from the wire, or from the MAC's own transmitter
// when looped (RCR LOOP: the PHY and the wire are not involved, and what
// the wire brings is not received).
func (m *Model) deliver(frame []byte, fault RxFault, looped bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushLagged()
	if !m.enabled() {
		return false
	}
	if !looped && (m.get(fec.ENETx_RCR)&fec.RCR_LOOP != 0 || m.phy.looped()) && !m.opts.NoLoopback {
		// In the MAC's or the PHY's loopback nothing from the medium is
		// received.
		m.stats.LoopDropped++
		return false
	}
	if !looped && !m.wireOK() {
		return false
	}
	if !m.accept(frame) {
		m.stats.Filtered++
		return false
	}
	if ring := m.classify(frame); ring != 0 {
		m.stats.Misclassified++
		m.violation("RX frame classified to ring %d by RCMR%d = %#x, a ring the driver never set up", ring, ring, m.get(fec.ENETx_RCMR1+uint32(ring-1)*4))
		return false
	}
	if m.busFault() {
		return false
	}
	if m.get(fec.ENETx_MRBR) == 0 {
		m.violation("RX with MRBR = 0")
		return false
	}
	enh := m.enhanced()
	// Buffer content: SHIFT16 pad, frame, FCS. SHIFT16 applies with legacy
	// descriptors too (RACC is not tied to EN1588; QEMU honours it only
	// with enhanced ones).
	data := m.rxBuf[:0]
	defer func() { m.rxBuf = data[:0] }()
	if m.opts.Caps.Has(fec.QuirkRACC) && m.get(fec.ENETx_RACC)&fec.RACC_SHIFT16 != 0 {
		data = append(data, 0, 0)
	}
	data = append(data, frame...)
	data = binary.LittleEndian.AppendUint32(data, crc32.ChecksumIEEE(frame))
	var st fec.RxStatus
	maxfl := int(m.get(fec.ENETx_RCR)>>16) & 0x3FFF
	if len(frame)+4 > maxfl {
		st |= fec.RX_LG
		m.raise(fec.EIR_BABR)
	}
	if ftrl := int(m.get(fec.ENETx_FTRL)) & 0x3FFF; len(frame)+4 > ftrl {
		st |= fec.RX_TR
		data = data[:ftrl+len(data)-len(frame)-4]
	}
	switch fault {
	case RxOverrun:
		st = fec.RX_OV
	case RxCRC:
		st |= fec.RX_CR
	case RxNonOctet:
		st |= fec.RX_NO
	}
	if da := frame[0]; da&1 != 0 {
		if [6]byte(frame[:6]) == [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF} {
			st |= fec.RX_BC
		} else {
			st |= fec.RX_MC
		}
	}
	// Checksum verdict, header length and protocol (enhanced, csum parts).
	e := rxEntry{data: data, frame: frame, st: st, crcErr: fault == RxCRC}
	if enh && m.opts.Caps.Has(fec.QuirkCsum) {
		e.e0, e.e1 = rxChecksum(frame)
	}
	if fault == RxMACError {
		e.e0 |= fec.RXE_ME
	}
	if m.faults.WrongVerdict > 0 && enh && m.opts.Caps.Has(fec.QuirkCsum) {
		m.faults.WrongVerdict--
		e.e0 ^= fec.RXE_PCR
	}
	if len(m.fifo) == 0 && m.rxReady() {
		m.writeRx(&e)
		return true
	}
	size := m.opts.RxFIFO
	if size == 0 {
		size = 2048
	}
	if m.fifoLen+len(data) > size {
		// Overflow: the frame is lost and the MAC flags the overrun on
		// the next descriptor it writes.
		m.stats.RxNoDescriptor++
		m.mibAdd("IEEE_R_MACERR", 1)
		if k := len(m.fifo); k == 0 || m.fifo[k-1].st != fec.RX_OV || m.fifo[k-1].frame != nil {
			m.fifo = append(m.fifo, rxEntry{st: fec.RX_OV})
		}
		return false
	}
	e.data, e.frame = bytes.Clone(data), bytes.Clone(frame)
	m.fifo = append(m.fifo, e)
	m.fifoLen += len(data)
	return true
}

// rxReady reports whether the uDMA has an empty descriptor to write. As on
// silicon, finding the next descriptor not empty clears RDAR.
func (m *Model) rxReady() bool {
	if m.get(fec.ENETx_RDAR) == 0 {
		return false
	}
	d, ok := m.desc(m.get(fec.ENETx_RDSR), m.rxIdx)
	if !ok {
		return false
	}
	if fec.RxStatus(load(&d[0])>>16)&fec.RX_E == 0 {
		m.set(fec.ENETx_RDAR, 0)
		return false
	}
	return true
}

// drainFIFO writes held frames while empty descriptors last.
func (m *Model) drainFIFO() {
	for len(m.fifo) > 0 && m.rxReady() {
		e := m.fifo[0]
		m.fifo = m.fifo[1:]
		m.fifoLen -= len(e.data)
		m.writeRx(&e)
	}
}

// writeRx writes e into descriptors from the current one.
func (m *Model) writeRx(e *rxEntry) {
	enh := m.enhanced()
	base := m.get(fec.ENETx_RDSR)
	mrbr := int(m.get(fec.ENETx_MRBR))
	data := e.data
	var ev uint32
	for off := 0; ; {
		d, ok := m.desc(base, m.rxIdx)
		if !ok {
			return
		}
		ls := load(&d[0])
		bst := fec.RxStatus(ls >> 16)
		if bst&fec.RX_E == 0 {
			m.set(fec.ENETx_RDAR, 0)
			m.stats.RxNoDescriptor++
			m.mibAdd("IEEE_R_MACERR", 1)
			m.violation("RX ring ran out in the middle of a frame")
			return
		}
		addr := load(&d[1])
		if a := m.opts.Caps.RxAlign; a > 1 && int(addr)%a != 0 {
			m.violation("RX descriptor %d: buffer %#x not %d-byte aligned", m.rxIdx, addr, a)
		}
		chunk := min(mrbr, len(data)-off)
		if chunk > 0 {
			if err := m.mem.DeviceWrite(dma.Addr(addr), data[off:off+chunk]); err != nil {
				m.violation("RX descriptor %d: %v", m.rxIdx, err)
			}
		}
		off += chunk
		last := off == len(data)
		nst := bst & (fec.RX_W | fec.RX_RO1 | fec.RX_RO2)
		length := mrbr
		if last {
			nst |= fec.RX_L | e.st
			length = len(data)
		}
		var bev uint32
		ctl := load(&d[2]) & 0xFFFF0000
		if !enh || ctl&fec.RXE_INT != 0 {
			bev |= fec.EIR_RXB
			if last {
				bev |= fec.EIR_RXF
			}
		}
		store(&d[0], uint32(length)&0xFFFF|uint32(nst)<<16)
		if enh {
			l := lagged{d: d, w2: ctl, ev: bev}
			if last {
				l.w2 |= e.e0
				l.w3, l.setW3 = e.e1, true
			}
			if m.opts.LagBDU {
				// Status first; the enhanced words, BDU and the event later.
				m.lagged = append(m.lagged, l)
				bev = 0
			} else {
				store(&d[2], l.w2)
				if l.setW3 {
					store(&d[3], l.w3)
				}
				store(&d[4], fec.BDU)
			}
		}
		ev |= bev
		if bst&fec.RX_W != 0 {
			m.rxIdx = 0
		} else {
			m.rxIdx++
		}
		if last {
			break
		}
	}
	if e.frame != nil {
		m.stats.RxFrames++
		m.mibFrame(&mibRx, e.frame)
	}
	if e.crcErr {
		m.mibAdd("IEEE_R_CRC", 1)
	}
	m.raise(ev)
}

// classify returns the RX ring (1 or 2) a VLAN-tagged frame is steered to
// by RCMR1/RCMR2 on the multi-queue parts: MATCHEN set and the frame's
// priority equal to one of CMP0..CMP3 (bits 2:0, 6:4, 10:8, 14:12; Linux
// fec.h RCMR_CMP_CFG). 0 is ring 0.
func (m *Model) classify(f []byte) int {
	if !m.opts.Caps.Has(fec.QuirkMultiQueue) || len(f) < 16 || binary.BigEndian.Uint16(f[12:]) != pkt.EtherTypeVLAN {
		return 0
	}
	pcp := uint32(f[14] >> 5)
	for ring, reg := range []uint32{fec.ENETx_RCMR1, fec.ENETx_RCMR2} {
		v := m.get(reg)
		if v&fec.RCMR_MATCHEN == 0 {
			continue
		}
		for k := 0; k < 4; k++ {
			if v>>(4*k)&7 == pcp {
				return ring + 1
			}
		}
	}
	return 0
}

// rxChecksum is the receive accelerator's verdict as the enhanced RX
// descriptor reports it (Table 22-35, IMX6ULLRM): e0 carries ICE, PCR,
// VLAN, IPV6 and FRAG; e1 the protocol type in bits 23:16 and the IP+L4
// header length in 32-bit words in bits 31:27 (0 for a frame that is not
// IP). As on silicon, ICE is set for a frame that is not IP and for an IP
// datagram with under 3 bytes of payload as well as for a bad IPv4 header
// checksum, and PCR whenever the TCP/UDP checksum was not found good: a bad
// one, a fragment, a protocol other than TCP and UDP. The payload checksum
// (bits 15:0) is not modelled and left 0.
func rxChecksum(f []byte) (e0, e1 uint32) {
	h, err := pkt.Parse(f)
	if h.VLANs > 0 {
		e0 |= fec.RXE_VLAN
	}
	if err != nil || h.IPEnd > len(f) || h.L4 > h.IPEnd {
		return e0 | fec.RXE_ICE, 0
	}
	if h.IPv6 {
		e0 |= fec.RXE_IPV6
	}
	if h.Fragment {
		e0 |= fec.RXE_FRAG
	}
	payload := h.IPEnd - h.L4
	if payload < 3 || !pkt.IPv4HeaderOK(f, &h) {
		e0 |= fec.RXE_ICE
	}
	l4hdr := 0
	switch {
	case h.Fragment:
	case h.Proto == pkt.ProtoTCP && payload >= 20:
		l4hdr = int(f[h.L4+12]>>4) * 4
	case h.Proto == pkt.ProtoUDP && payload >= 8:
		l4hdr = 8
	}
	if ok, checked := pkt.TransportOK(f, &h); !ok || !checked || payload < 3 {
		e0 |= fec.RXE_PCR
	}
	hl := min((h.L4-h.L3+l4hdr)/4, 31)
	e1 = uint32(hl)<<fec.RXE1_HLEN_SHIFT | uint32(h.Proto&0xFF)<<fec.RXE1_PROTO_SHIFT
	return e0, e1
}

// InjectDescriptor completes the current RX descriptor with arbitrary
// content, length, status and extended words, as a misbehaving MAC might:
// for fuzzing the driver's descriptor decoding. It reports whether an empty
// descriptor was there.
func (m *Model) InjectDescriptor(data []byte, length uint16, st fec.RxStatus, e0, e1 uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.desc(m.get(fec.ENETx_RDSR), m.rxIdx)
	if !ok || fec.RxStatus(load(&d[0])>>16)&fec.RX_E == 0 {
		return false
	}
	if n := min(len(data), int(m.get(fec.ENETx_MRBR))); n > 0 {
		if err := m.mem.DeviceWrite(dma.Addr(load(&d[1])), data[:n]); err != nil {
			m.violation("inject: %v", err)
		}
	}
	w := fec.RxStatus(load(&d[0])>>16) & fec.RX_W
	if m.enhanced() {
		store(&d[2], load(&d[2])&0xFFFF0000|e0&0xFFFF|e0&0xFF7F0000)
		store(&d[3], e1)
		store(&d[4], fec.BDU)
	}
	store(&d[0], uint32(length)|uint32(st&^fec.RX_E&^fec.RX_W|w)<<16)
	if w != 0 {
		m.rxIdx = 0
	} else {
		m.rxIdx++
	}
	return true
}
