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
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
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
