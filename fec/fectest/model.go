// Package fectest is a host model of the i.MX ENET for driver tests: a
// register file behind mmio.Regs and a uDMA that walks buffer descriptors
// and moves frame data through a dmatest.Memory exactly as silicon does.
//
// The model enforces what silicon enforces and reports what silicon would
// silently corrupt: descriptor ownership (R/E), wrap (W) and last (L) bits,
// multi-descriptor TX gather, the SoC's buffer alignment (a misaligned buffer
// is a reported violation, never accepted), ring bases, register access
// width and range. It inserts checksums the way the MAC does (over the
// fields as given, so a field the driver forgot to zero yields a wrong sum),
// validates RX checksums, filters addresses, counts MIB events, raises EIR
// events on a level interrupt line, and injects faults: RX overrun and other
// RX errors, bus errors (EBERR), TDAR cleared early (ERR006358), a stuck
// MDIO bus. Its PHY negotiates with a configurable link partner (phy.go).
// Optionally the uDMA runs asynchronously (AsyncTx) and publishes BDU late
// (LagBDU). It differs from QEMU's imx.enet as listed in
// docs/qemu-imx-enet.md.
package fectest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/pkt"
)

// Options configure a Model.
type Options struct {
	Caps fec.Caps
	Mem  *dmatest.Memory
	// PHYAddr is the MDIO address the PHY answers (default 2, ENET1's PHY on
	// the i.MX6UL EVK).
	PHYAddr int
	// PartnerAdv is what the link partner advertises (ANAR bits; default
	// 100/10 full and half); PartnerGbit adds 1000BASE-T full duplex.
	// PartnerForced, if set, is a partner with autonegotiation off, fixed
	// at that speed and duplex: the PHY falls back to parallel detection
	// (speed sensed, half duplex).
	PartnerAdv    uint16
	PartnerGbit   bool
	PartnerForced *fec.Link
	// PHYGbit makes the PHY 1000BASE-T capable (a KSZ9021-class RGMII PHY);
	// otherwise it is a 10/100 PHY (KSZ8081, RMII).
	PHYGbit bool
	// ANReads is how many BMSR reads autonegotiation takes to complete.
	ANReads int
	// IPGClock is the module clock MDC is divided from (default 66 MHz);
	// an MDIO frame clocked above 2.5 MHz is a violation.
	IPGClock uint32
	// AsyncTx makes the uDMA run only when StepTx is called, as silicon
	// runs beside the CPU: a TDAR write only sets TDAR. After sending the
	// last ready frame the uDMA keeps TDAR set for one more step while it
	// closes (descriptors made ready then are not seen: a missed kick) and
	// a TDAR write in that window hangs the TX state machine on parts with
	// ERR007885 (on the others the write is lost).
	AsyncTx bool
	// LagBDU makes the uDMA publish a descriptor in two steps: status (E
	// or R cleared) first, the enhanced words and BDU only at the next
	// StepBDU (or the next frame). RXF/TXF follow BDU.
	LagBDU bool
	// RxFIFO is the receive FIFO in bytes (default 2048; a modelling
	// choice, not a figure from the manuals). Frames arriving while no
	// empty descriptor is available wait in it; one that does not fit is
	// lost and reported with OV on the next descriptor.
	RxFIFO int
	// NoLoopback and NoMIB make the model behave as QEMU's imx_fec.c does
	// (both are TODOs there): RCR LOOP and the PHY's BMCR loopback are
	// ignored (QEMU 7.2's PHY stores BMCR bit 14 among its 0x7980 and
	// loops nothing), frames go to the wire, and the MIB counters never
	// move.
	NoLoopback, NoMIB bool
}

// Faults are injected by tests.
type Faults struct {
	// ClearTDAREarly makes the next N TDAR kicks stop after one frame and
	// clear TDAR though more descriptors are ready (ERR006358).
	ClearTDAREarly int
	// BusError makes the next uDMA access fail with EBERR; the uDMA stops
	// until the MAC is reset.
	BusError bool
	// TxStalled makes the uDMA accept TDAR kicks but send nothing (a TX
	// path held off, e.g. by flow control), so descriptors stay in flight.
	TxStalled bool
	// MDIOStuck makes MDIO transactions never complete.
	MDIOStuck bool
	// TxError makes the next N frames complete with this enhanced TX error
	// status (e.g. TXE_TXE|TXE_UE).
	TxError      uint32
	TxErrorCount int
	// ResetStuck makes a write of ECR.RESET never complete: RESET reads
	// back set and nothing is reset. The manual has RESET clear itself
	// once the MAC's reset is done (IMX6ULLRM 22.5.5, ECR; Linux
	// fec_restart gives it 10 us without polling); a MAC whose clock a
	// boot loader left gated is where it would not (on silicon an access
	// may instead stall the bus).
	ResetStuck bool
	// SkipFragment drops the data of the second descriptor of the next N
	// frames of several descriptors (a fragment lost on its way to the
	// wire); the frame goes out shorter.
	SkipFragment int
	// WrongVerdict inverts the checksum verdict of the next N frames
	// received: a good sum reported bad and a bad one good (an RX
	// accelerator that misjudges).
	WrongVerdict int
}

// RxFault corrupts one delivered frame as the MAC would report it.
type RxFault int

// RX faults.
const (
	RxOK RxFault = iota
	RxOverrun
	RxCRC
	RxNonOctet
	RxMACError
)

// Stats counts what the model saw.
type Stats struct {
	TxFrames, RxFrames int
	// LoopDropped counts frames lost to the loopback: looped with DRT
	// set, or arriving from the wire while RCR LOOP is set.
	LoopDropped int
	// RxNoDescriptor counts frames lost because the RX FIFO overflowed
	// while no empty descriptor was available.
	RxNoDescriptor, Filtered int
	Kicks                    int
	// SpuriousMII counts MII events raised by an MSCR write (from zero,
	// with MMFR non-zero) rather than by an MDIO frame.
	SpuriousMII int
	// Misclassified counts frames sent to RX rings 1/2 by a stale RCMR.
	Misclassified int
	// NoLink counts frames lost because the PHY had no link; LinkMismatch
	// frames lost because the MAC's speed or duplex differed from the
	// PHY's; DuplexMismatch frames sent while the PHY and the partner ran
	// different duplex modes.
	NoLink, LinkMismatch, DuplexMismatch int
	// CsumWithoutStrfwd counts frames that asked for checksum insertion
	// with TFWR.STRFWD clear: they went out with the fields as given.
	CsumWithoutStrfwd int
}

const regSpace = 0x800

// Model is one ENET. It is safe for concurrent use.
type Model struct {
	mu      sync.Mutex
	opts    Options
	mem     *dmatest.Memory
	regs    [regSpace / 4]uint32
	txIdx   int
	rxIdx   int
	halted  bool // after a bus error, until reset
	phy     phy
	peer    func([]byte)
	irq     chan struct{}
	faults  Faults
	stats   Stats
	viol    []string
	pending [][]byte // transmitted frames to hand to the peer once unlocked
	looped  [][]byte // transmitted frames to receive once unlocked (RCR LOOP)
	txBuf   []byte   // scratch, reused so the model allocates nothing per frame
	bds     []txBD
	rxBuf   []byte
	icPend  [2]int // frames counted towards TXIC0 / RXIC0 thresholds
	txState txState
	txHung  bool      // ERR007885: TX state machine hung until reset
	lagged  []lagged  // descriptor words not yet published (LagBDU)
	fifo    []rxEntry // frames waiting for an empty descriptor
	fifoLen int       // bytes in fifo
}

type txState int

const (
	txIdle    txState = iota // TDAR 0
	txActive                 // TDAR 1, walking the ring
	txClosing                // TDAR 1, found no ready descriptor, about to clear TDAR
)

// lagged is a descriptor update held back by LagBDU.
type lagged struct {
	d      *[8]uint32
	w2, w3 uint32
	setW3  bool
	ev     uint32
}

// flushLagged publishes descriptor words held back by LagBDU: the enhanced
// words, then BDU, then the events.
func (m *Model) flushLagged() {
	l := m.lagged
	m.lagged = nil
	for _, x := range l {
		store(&x.d[2], x.w2)
		if x.setW3 {
			store(&x.d[3], x.w3)
		}
		store(&x.d[4], fec.BDU)
		m.raise(x.ev)
	}
}

// StepBDU publishes what LagBDU held back.
func (m *Model) StepBDU() {
	m.mu.Lock()
	m.flushLagged()
	m.mu.Unlock()
}

// New returns a model in its reset state.
func New(opts Options) *Model {
	if opts.PHYAddr == 0 {
		opts.PHYAddr = 2
	}
	if opts.IPGClock == 0 {
		opts.IPGClock = 66_000_000
	}
	if opts.PartnerAdv == 0 {
		opts.PartnerAdv = fec.ADV_100FULL | fec.ADV_100HALF | fec.ADV_10FULL | fec.ADV_10HALF | 1
	}
	m := &Model{opts: opts, mem: opts.Mem, irq: make(chan struct{}, 1)}
	m.reset()
	m.phy.init(&m.opts)
	return m
}

// reset puts registers in their reset state (RCR has LOOP set, as silicon).
func (m *Model) reset() {
	mib := m.regs[0x200/4 : 0x2E4/4]
	saved := append([]uint32(nil), mib...) // MIB counters survive a MAC reset
	m.regs = [regSpace / 4]uint32{}
	copy(m.regs[0x200/4:], saved)
	m.set(fec.ENETx_ECR, 0xF000_0000)
	m.set(fec.ENETx_RCR, 0x05EE_0001)
	m.set(fec.ENETx_PAUR, 0x8808)
	m.set(fec.ENETx_OPD, 0x0001_0000)
	m.set(fec.ENETx_MIBC, fec.MIBC_DIS|fec.MIBC_IDLE)
	m.set(fec.ENETx_FTRL, 0x7FF)
	m.txIdx, m.rxIdx, m.halted = 0, 0, false
	m.txState, m.txHung = txIdle, false
	m.fifo, m.fifoLen = nil, 0
	m.lagged = nil
}

func (m *Model) get(off uint32) uint32    { return m.regs[off/4] }
func (m *Model) set(off uint32, v uint32) { m.regs[off/4] = v }

func (m *Model) violation(format string, args ...any) {
	m.viol = append(m.viol, fmt.Sprintf(format, args...))
}

// Violations returns and forgets what the model found wrong in the driver's
// use of the device.
func (m *Model) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.viol
	m.viol = nil
	return v
}

// Stats returns the model's counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// SetFaults replaces the injected faults.
func (m *Model) SetFaults(f Faults) {
	m.mu.Lock()
	m.faults = f
	m.mu.Unlock()
}

// SetPeer sets where transmitted frames go. The model calls it without its
// lock held, with a frame the callee may keep.
func (m *Model) SetPeer(f func(frame []byte)) {
	m.mu.Lock()
	m.peer = f
	m.mu.Unlock()
}

// IRQ delivers a token whenever the interrupt line (EIR & EIMR != 0) is
// asserted.
func (m *Model) IRQ() <-chan struct{} { return m.irq }

func (m *Model) raise(ev uint32) {
	ev = m.coalesce(ev)
	m.regs[fec.ENETx_EIR/4] |= ev
	if m.get(fec.ENETx_EIR)&m.get(fec.ENETx_EIMR) != 0 {
		select {
		case m.irq <- struct{}{}:
		default:
		}
	}
}

// coalesce holds back TXF/RXF while TXIC0/RXIC0 coalescing is enabled
// until ICFT frames have completed (22.5.14/22.5.15, IMX6ULLRM). The timer
// threshold is not modelled: a frame count never reached holds the event
// for good, which is what a stale coalescing setup does to a driver that
// expects one interrupt per frame.
func (m *Model) coalesce(ev uint32) uint32 {
	for k, c := range []struct {
		bit uint32
		reg uint32
	}{{fec.EIR_TXF, fec.ENETx_TXIC0}, {fec.EIR_RXF, fec.ENETx_RXIC0}} {
		ic := m.get(c.reg)
		if ev&c.bit == 0 || ic&fec.IC_ICEN == 0 {
			continue
		}
		m.icPend[k]++
		if m.icPend[k] < int(ic>>fec.IC_ICFT&0xFF) {
			ev &^= c.bit
		} else {
			m.icPend[k] = 0
		}
	}
	return ev
}

func (m *Model) checkOff(off uint32) bool {
	if off%4 != 0 || off >= regSpace {
		m.violation("register access at %#x: not a 32-bit register of the ENET", off)
		return false
	}
	return true
}

// Read32 implements mmio.Regs.
func (m *Model) Read32(off uint32) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.checkOff(off) {
		return 0
	}
	return m.get(off)
}

// Write32 implements mmio.Regs.
func (m *Model) Write32(off, v uint32) {
	m.mu.Lock()
	m.write(off, v)
	out, peer, loop := m.pending, m.peer, m.looped
	m.pending, m.looped = nil, nil
	m.mu.Unlock()
	if peer != nil {
		for _, f := range out {
			peer(f)
		}
	}
	m.loopBack(loop)
}

// loopBack receives the frames the MAC looped back (RCR LOOP).
func (m *Model) loopBack(frames [][]byte) {
	for _, f := range frames {
		m.deliver(f, RxOK, true)
	}
}

func (m *Model) write(off, v uint32) {
	if !m.checkOff(off) {
		return
	}
	switch off {
	case fec.ENETx_EIR:
		m.regs[off/4] &^= v
	case fec.ENETx_EIMR:
		m.set(off, v)
		m.raise(0)
	case fec.ENETx_ECR:
		if v&fec.ECR_RESET != 0 && m.faults.ResetStuck {
			m.set(off, m.get(off)|fec.ECR_RESET)
			return
		}
		if v&fec.ECR_RESET != 0 {
			m.reset()
			m.set(fec.ENETx_PALR, 0)
			m.set(fec.ENETx_PAUR, 0x8808)
			return
		}
		m.set(off, v)
		if v&fec.ECR_ETHEREN == 0 {
			m.txIdx, m.rxIdx = 0, 0
			m.txState, m.txHung = txIdle, false
			m.fifo, m.fifoLen = nil, 0
			m.set(fec.ENETx_TDAR, 0)
			m.set(fec.ENETx_RDAR, 0)
		} else if v&fec.ECR_DBSWP == 0 {
			m.violation("ECR.DBSWP clear: descriptors would be read big-endian on ARM")
		}
	case fec.ENETx_TDAR:
		if !m.enabled() {
			return
		}
		m.stats.Kicks++
		if m.opts.AsyncTx {
			switch m.txState {
			case txIdle:
				m.txState = txActive
				m.set(off, fec.DAR_ACTIVE)
			case txClosing:
				if m.opts.Caps.Has(fec.QuirkERR007885) {
					m.txHung = true
					m.violation("TDAR written while the uDMA was clearing it: ERR007885, the TX state machine hangs until reset")
				}
			}
			return
		}
		m.set(off, fec.DAR_ACTIVE)
		if !m.faults.TxStalled {
			m.processTx(0)
		}
	case fec.ENETx_RDAR:
		if m.enabled() {
			m.set(off, fec.DAR_ACTIVE)
			m.drainFIFO()
		}
	case fec.ENETx_MMFR:
		// Writing MMFR starts a frame whenever MSCR[7:0] is non-zero (Linux
		// fec_enet_mii_init, FEC_QUIRK_CLEAR_SETUP_MII).
		m.set(off, v)
		if m.get(fec.ENETx_MSCR)&0xFF != 0 {
			m.mdio(v)
		}
	case fec.ENETx_MSCR:
		// Writing MSCR from zero to non-zero while MMFR is non-zero raises
		// an MII event with no frame behind it.
		old := m.get(off)
		m.set(off, v&0x7FE)
		if m.get(fec.ENETx_MMFR) != 0 && old&0xFF == 0 && v&0xFF != 0 {
			m.stats.SpuriousMII++
			m.raise(fec.EIR_MII)
		}
	case fec.ENETx_RDSR, fec.ENETx_TDSR:
		if v%8 != 0 {
			m.violation("ring base %#x (register %#x) not 8-byte aligned", v, off)
		}
		m.set(off, v&^7)
	case fec.ENETx_MRBR:
		m.set(off, v&fec.MRBR_R_BUF_SIZE_MASK)
	case fec.ENETx_MIBC:
		m.set(off, v&(fec.MIBC_DIS|fec.MIBC_CLEAR))
	case fec.ENETx_PAUR:
		m.set(off, v&0xFFFF0000|0x8808)
	default:
		if off >= 0x200 && off < 0x2E4 {
			if m.get(fec.ENETx_MIBC)&fec.MIBC_DIS == 0 {
				m.violation("write to MIB counter %#x while counting", off)
			}
		}
		m.set(off, v)
	}
}

func (m *Model) enabled() bool {
	return m.get(fec.ENETx_ECR)&fec.ECR_ETHEREN != 0 && !m.halted
}

func (m *Model) enhanced() bool { return m.get(fec.ENETx_ECR)&fec.ECR_EN1588 != 0 }

func (m *Model) descSize() int {
	if m.enhanced() {
		return fec.EnhancedDescSize
	}
	return fec.LegacyDescSize
}

// mdio runs one MDIO frame.
func (m *Model) mdio(v uint32) {
	if m.faults.MDIOStuck || m.get(fec.ENETx_MSCR)>>fec.MSCR_SPEED&0x3F == 0 {
		return // no MDC clock: nothing goes out, nothing completes
	}
	pa, ra := int(v>>fec.MMFR_PA)&0x1F, int(v>>fec.MMFR_RA)&0x1F
	op := v >> 28 & 3
	if v>>30 != 1 {
		m.violation("MMFR %#08x written while MDC runs: a stray frame that is not clause 22 went out on the MDIO bus", v)
	}
	mscr := m.get(fec.ENETx_MSCR)
	if mdc := m.opts.IPGClock / ((mscr>>fec.MSCR_SPEED&0x3F + 1) * 2); mdc > 2_500_000 {
		m.violation("MDC at %d Hz (IPG clock %d Hz, MSCR %#x): above the 2.5 MHz of IEEE 802.3 clause 22", mdc, m.opts.IPGClock, mscr)
	}
	switch op {
	case 1: // write
		if pa == m.opts.PHYAddr {
			m.phy.write(ra, uint16(v))
		}
	case 2: // read
		d := uint16(0xFFFF)
		if pa == m.opts.PHYAddr {
			d = m.phy.read(ra)
		}
		m.set(fec.ENETx_MMFR, v&^0xFFFF|uint32(d))
	}
	m.raise(fec.EIR_MII)
}

// desc returns the words of descriptor i of the ring at base.
func (m *Model) desc(base uint32, i int) (*[8]uint32, bool) {
	b, err := m.mem.Coherent(dma.Addr(base)+dma.Addr(i*m.descSize()), m.descSize())
	if err != nil {
		m.violation("descriptor %d of ring %#x: %v", i, base, err)
		return nil, false
	}
	return (*[8]uint32)(unsafe.Pointer(&b[0])), true
}

func load(w *uint32) uint32     { return atomic.LoadUint32(w) }
func store(w *uint32, v uint32) { atomic.StoreUint32(w, v) }

// busFault consumes an injected bus error: EBERR, uDMA stopped.
func (m *Model) busFault() bool {
	if !m.faults.BusError {
		return false
	}
	m.faults.BusError = false
	m.halted = true
	m.set(fec.ENETx_TDAR, 0)
	m.set(fec.ENETx_RDAR, 0)
	m.raise(fec.EIR_EBERR)
	return true
}

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

func (m *Model) mibAdd(name string, v uint32) {
	if m.opts.NoMIB {
		return
	}
	off, ok := fec.MIBRegisterOffset(name)
	if !ok {
		panic("fectest: unknown MIB counter " + name)
	}
	m.mibAt(off, v)
}

func (m *Model) mibAt(off, v uint32) {
	if m.get(fec.ENETx_MIBC)&fec.MIBC_DIS == 0 {
		m.regs[off/4] += v
	}
}

// mibDir holds the offsets of the per-frame counters of one direction.
type mibDir struct {
	packets, octets, frameOK, octetsOK, bc, mc uint32
	buckets                                    [7]uint32 // 64, 65-127, ..., 1024-2047, >=2048
}

func mibOffsets(d string) mibDir {
	o := func(n string) uint32 {
		off, ok := fec.MIBRegisterOffset(n)
		if !ok {
			panic("fectest: unknown MIB counter " + n)
		}
		return off
	}
	r := mibDir{packets: o("RMON_" + d + "_PACKETS"), octets: o("RMON_" + d + "_OCTETS"),
		frameOK: o("IEEE_" + d + "_FRAME_OK"), octetsOK: o("IEEE_" + d + "_OCTETS_OK"),
		bc: o("RMON_" + d + "_BC_PKT"), mc: o("RMON_" + d + "_MC_PKT")}
	for i, b := range []string{"P64", "P65TO127", "P128TO255", "P256TO511", "P512TO1023", "P1024TO2047", "P_GTE2048"} {
		r.buckets[i] = o("RMON_" + d + "_" + b)
	}
	return r
}

var mibTx, mibRx = mibOffsets("T"), mibOffsets("R")

// mibFrame counts one good frame of direction d.
func (m *Model) mibFrame(d *mibDir, f []byte) {
	if m.opts.NoMIB {
		return
	}
	n := len(f) + 4
	m.mibAt(d.packets, 1)
	m.mibAt(d.octets, uint32(n))
	m.mibAt(d.frameOK, 1)
	m.mibAt(d.octetsOK, uint32(n))
	if f[0]&1 != 0 {
		if f[0] == 0xFF && f[1] == 0xFF {
			m.mibAt(d.bc, 1)
		} else {
			m.mibAt(d.mc, 1)
		}
	}
	b := 6
	for i, lim := range []int{64, 127, 255, 511, 1023, 2047} {
		if n <= lim {
			b = i
			break
		}
	}
	m.mibAt(d.buckets[b], 1)
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
