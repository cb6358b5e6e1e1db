// Package e1000etest is a host model of the subset of the Intel 82574L
// that package e1000e uses, attached to a pcietest root complex as a
// pluggable PCI function (8086:10d3, class 020000, BAR0 of 128 KiB, MSI,
// INTA) whose DMA goes through the dma/dmatest model.
//
// What it models: CTRL.RST with the reset rules of e1000_reset_hw_82571
// (GIO master disable before it, EECD.AUTO_RD after it, then 25 ms before
// the PHY and NVM; see Options), STATUS (LU, FD, 1000 Mb/s, GIO master
// enable), the NVM through
// EERD (MAC in words 0-2, loaded into RAL0/RAH0 at reset), MDIC with a
// PHY at address 1 (other addresses set MDIC.E, as QEMU does), ICR (clear
// on read), ICS, IMS, IMC with INTx as a level and MSI on every new
// unmasked cause, RCTL (EN, UPE, MPE, BAM, LPE) with RAL0/RAH0 and the
// MTA hash (MO = 00) as the receive filter, extended RX descriptors
// (RFCTL.EXTEN) with IPCS/TCPCS/UDPCS/IPE/TCPE verdicts computed here,
// TX context and extended data descriptors, checksum insertion exactly as
// the hardware does it (sum from xxCSS to xxCSE of what is in memory,
// seeds included, complement stored at xxCSO), TCP segmentation (the datasheet's TCP segmentation section:
// per segment IPv4 total length, ID incremented, header checksum; IPv6
// payload length; TCP sequence; PSH and FIN only in the last segment; TCP
// checksum from the driver's seed plus the segment length), DD write-back
// only for descriptors with RS, the statistics registers it counts, and
// MAC (RCTL.LBM 01b) and PHY (BMCR) loopback with faults for the driver's
// self-test (loopback.go).
//
// It reports as violations (Take) what the silicon would turn into
// corruption or a hang: rings not 16-byte aligned or of a length not a
// multiple of 128, head/tail outside the ring, legacy TX or RX
// descriptors (not modelled), zero-length data descriptors, a TSO data
// descriptor without a TSO context, HDRLEN or PAYLEN that disagree with
// what the descriptors gather, MSS 0, a packet longer than 16 KiB
// without TSO, a packet gathered from more than 64 data descriptors
// (which QEMU's e1000e, the reference, drops silently), and every DMA
// error (buffers the CPU owns, addresses
// outside memory, DMA without bus mastering, through pcietest/dmatest).
//
// What it leaves out: flow control, VLAN insertion and stripping, packet
// split (RCTL.DTYP), RSS and MSI-X, interrupt throttling and delay timers
// (RDTR, RADV, TIDV, TADV, ITR: every cause fires at once), the
// descriptor minimum threshold (RXDMT0), NVM writes and checksums, PHY
// registers beyond IDs and status, jumbo frames, CRC errors on the wire
// (InjectError stands in), UDP checksum 0 → 0xFFFF, and time: TX runs
// when TDT is written (or on ProcessTX with Options.ManualTX).
package e1000etest

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// Register offsets (82574 datasheet 10.2; mirror of package e1000e's,
// written out here so the model does not import the driver). Audited
// against Linux drivers/net/ethernet/intel/e1000e/regs.h (E1000_CTRL 0,
// STATUS 8, EERD 0x14, MDIC 0x20, ICR 0xC0, ICS 0xC8, IMS 0xD0, IMC 0xD8,
// RCTL 0x100, TCTL 0x400, RDBAL(0) 0x2800 .. RDT(0) 0x2818, TDBAL(0)
// 0x3800 .. TDT(0) 0x3818, RXCSUM 0x5000, RFCTL 0x5008, MTA 0x5200,
// RAL(0)/RAH(0) 0x5400/0x5404, statistics 0x4000-0x40FF) and QEMU
// hw/net/e1000_regs.h. Field bits: EERD START 0 / DONE 1 / ADDR 2 / DATA
// 16 (E1000_NVM_RW_*), MDIC REG 16 / PHY 21 / OP 26 / READY 28 / ERROR 30
// (PHY address 1 only: QEMU e1000e_set_mdic sets MDIC.E otherwise), ICR
// INT_ASSERTED bit 31 and clear on read without MSI-X (QEMU
// e1000e_mac_icr_read), STATUS FD 0 / LU 1 / SPEED 7:6 (10 = 1000) /
// GIO_MASTER_ENABLE 19, CTRL.RST 26, RCTL EN 1 / UPE 3 / MPE 4 / LPE 5 /
// DTYP 11:10 / MO 13:12 / BAM 15 / BSIZE 17:16 / BSEX 25 / SECRC 26,
// RXCSUM IPOFL 8 / TUOFL 9, RFCTL.EXTEN 15, MTA hash for MO 00 (mc_addr[4]
// >> 4 | mc_addr[5] << 4, 12 bits: e1000_hash_mc_addr), extended RX
// write-back (union e1000_rx_desc_extended: status_error DD 0 / EOP 1 /
// IXSM 2 / UDPCS 4 / TCPCS 5 / IPCS 6, errors CE 24 / SE 25 / TCPE 29 /
// IPE 30 / RXE 31, length at byte 12), TX context (struct
// e1000_context_desc: IPCSS/IPCSO/IPCSE, TUCSS/TUCSO/TUCSE, PAYLEN 19:0
// with TUCMD TSE 26 / IP 25 / TCP 24, HDRLEN 15:8 and MSS 31:16 of dword
// 3) and data descriptors (DTALEN 19:0, DTYP 23:20 = 1, DCMD EOP 24 / IFCS
// 25 / TSE 26 / RS 27 / DEXT 29, POPTS IXSM 8 / TXSM 9 of dword 3, DD bit
// 0 written back with RS). Oversize limits follow QEMU e1000x_is_oversized
// (1518 bytes without FCS with LPE clear, 16 KiB - 4 with it).
const (
	rCTRL   = 0x0000
	rSTATUS = 0x0008
	rEECD   = 0x0010
	rEXTCNF = 0x0F00 // EXTCNF_CTRL: MDIO software ownership
	rEERD   = 0x0014
	rMDIC   = 0x0020
	rICR    = 0x00C0
	rICS    = 0x00C8
	rIMS    = 0x00D0
	rIMC    = 0x00D8
	rRCTL   = 0x0100
	rTCTL   = 0x0400
	rRDBAL  = 0x2800
	rRDBAH  = 0x2804
	rRDLEN  = 0x2808
	rRDH    = 0x2810
	rRDT    = 0x2818
	rTDBAL  = 0x3800
	rTDBAH  = 0x3804
	rTDLEN  = 0x3808
	rTDH    = 0x3810
	rTDT    = 0x3818
	rRXCSUM = 0x5000
	rRFCTL  = 0x5008
	rMTA    = 0x5200
	rRAL0   = 0x5400
	rRAH0   = 0x5404

	sCRCERRS = 0x4000
	sMPC     = 0x4010
	sROC     = 0x40AC
	sRUC     = 0x40A4
	sGPRC    = 0x4074
	sBPRC    = 0x4078
	sMPRC    = 0x407C
	sGPTC    = 0x4080
	sGORCL   = 0x4088
	sGORCH   = 0x408C
	sGOTCL   = 0x4090
	sGOTCH   = 0x4094
	sRNBC    = 0x40A0
	sTPR     = 0x40D0
	sTPT     = 0x40D4
	sTSCTC   = 0x40F8

	intTXDW = 1 << 0
	intLSC  = 1 << 2
	intRXO  = 1 << 6
	intRXT0 = 1 << 7
)

// Options configure a Model.
type Options struct {
	// Mem is the DMA memory model the descriptor rings live in: the model
	// reads and writes descriptors in place, one 32-bit word at a time,
	// as the driver does (buffers go through the PCI function's DMA).
	Mem *dmatest.Memory
	MAC [6]byte
	// NoNVM: EERD never completes (the driver must fall back to RAL0/RAH0).
	NoNVM bool
	// LinkDown keeps STATUS.LU clear.
	LinkDown bool
	// ManualTX: descriptors are processed only by ProcessTX, so the driver
	// sees the ring fill up.
	ManualTX bool
	// ResetPolls is how many CTRL reads RST stays set after a reset
	// (default 0: clear at once, as QEMU).
	ResetPolls int
	// ResetStuck: CTRL.RST never clears.
	ResetStuck bool

	// Nanotime is the clock the reset rules below run on (pass the
	// pcietest Host's). Without it the NVM auto-read completes at once.
	Nanotime func() int64
	// AutoReadDelay is how long after a reset the NVM auto-read takes
	// before EECD.AUTO_RD sets (default 2 ms); AutoReadNever keeps it
	// clear.
	AutoReadDelay time.Duration
	AutoReadNever bool

	// NoLoopback: RCTL.LBM and the PHY's BMCR loopback are ignored, and
	// frames go to the wire (OnTransmit) as always.
	NoLoopback bool
	// FragmentTSO: a TSO packet leaves as IPv4 fragments of the whole
	// datagram instead of TCP segments, as QEMU's e1000e does before 8.0
	// with a backend that takes no virtio-net header (hw/net/net_tx_pkt.c
	// net_tx_pkt_do_sw_csum, then net_tx_pkt_do_sw_fragmentation: pieces
	// of the MSS rounded down to 8 bytes, the TCP header in the first).
	// Not silicon behaviour: it lets the driver's self-test be tested on
	// what QEMU does.
	FragmentTSO bool
}

// MaxTxFrags is the most data descriptors QEMU's e1000e gathers one TX
// packet from (E1000E_MAX_TX_FRAGS in hw/net/e1000e_core.c, QEMU 7.2).
const MaxTxFrags = 64

// Stats count what the model did.
type Stats struct {
	TxFrames, TxPackets, TxTSO, TxDescs int
	// TxMaxDataDescs is the most data descriptors one packet was
	// gathered from.
	TxMaxDataDescs                 int
	RxFrames, RxFiltered, RxNoDesc int
	RxTooLong, RxRunt, RxDisabled  int
	RxPHYHung                      int // frames lost to a hung PHY (HangPHY)
	MSIs                           int
	// Looped counts frames the MAC transmitted back to its own receiver
	// (loopback); RxWhileLooped frames from the wire dropped meanwhile;
	// LoopDropped frames lost to Faults.DropLoop.
	Looped, RxWhileLooped, LoopDropped int
}

// Model is one 82574L.
type Model struct {
	fn   *pcietest.Function
	opts Options

	mu       sync.Mutex
	reg      map[uint32]uint32
	stats    map[uint32]uint64 // statistics, clear on read
	nvm      [64]uint16
	phy      [32]uint16
	resetCnt int
	// resetAt is the time of the last CTRL.RST; resetting is set from
	// then until the PHY configuration after the auto-read is done.
	resetAt   int64
	resetting bool
	phyHung   bool
	viol      []string
	st        Stats
	irq       chan struct{}
	out       func([]byte)

	// TX state across descriptors.
	ctx     txCtx
	gather  []byte
	ndata   int // data descriptors of the packet being gathered
	dataTSE bool
	ifcs    bool // the packet's first data descriptor had DCMD.IFCS
	popts   uint32
	pending [][]byte // frames to hand to out once unlocked
	raw     *rawWB   // InjectWriteback's write-back
	owned   map[uint32][4]uint32
	faults  Faults
}

// New returns a model and its PCI function; attach the function to a
// pcietest.Host (Attach(0, m.Function())).
func New(o Options) *Model {
	m := &Model{opts: o, reg: map[uint32]uint32{}, stats: map[uint32]uint64{}, irq: make(chan struct{}, 1)}
	for i := 0; i < 3; i++ {
		m.nvm[i] = uint16(o.MAC[2*i]) | uint16(o.MAC[2*i+1])<<8
	}
	f := pcietest.NewEndpoint(0x8086, 0x10D3, 0x020000)
	f.SetBAR(0, 128<<10, pcietest.Mem32, m)
	f.AddCapability(0x01, make([]byte, 6)) // power management
	f.AddMSI(true)
	f.AddPCIe(0, 1, 1)
	f.SetPin(1)
	m.fn = f
	m.reset()
	return m
}

// Function returns the PCI function to attach.
func (m *Model) Function() *pcietest.Function { return m.fn }

// IRQ is signalled whenever the model raises INTx or sends an MSI.
func (m *Model) IRQ() <-chan struct{} { return m.irq }

// OnTransmit installs where transmitted frames go (no FCS). It is called
// without the model's lock held.
func (m *Model) OnTransmit(f func([]byte)) {
	m.mu.Lock()
	m.out = f
	m.mu.Unlock()
}

// Stats returns the model's counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// Take returns and forgets the violations recorded so far.
func (m *Model) Take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.viol
	m.viol = nil
	return v
}

// SetLink changes the link and raises LSC.
func (m *Model) SetLink(up bool) {
	m.mu.Lock()
	m.opts.LinkDown = !up
	m.updateStatus()
	m.cause(intLSC)
	m.mu.Unlock()
}

func (m *Model) violate(format string, a ...any) {
	_, file, line, _ := runtime.Caller(2)
	m.viol = append(m.viol, fmt.Sprintf(format, a...)+fmt.Sprintf(" (at %s:%d)", file, line))
}

func (m *Model) reset() {
	m.reg = map[uint32]uint32{}
	m.stats = map[uint32]uint64{}
	m.ctx = txCtx{}
	m.gather, m.ndata = nil, 0
	m.owned = nil
	m.reg[rRAL0] = uint32(m.nvm[0]) | uint32(m.nvm[1])<<16
	m.reg[rRAH0] = uint32(m.nvm[2]) | 1<<31
	m.phy[1] = 0x7949 // BMSR: capabilities, auto-negotiation complete
	m.phy[2], m.phy[3] = 0x0141, 0x0CB0
	m.updateStatus()
	if m.opts.ResetStuck {
		m.reg[rCTRL] |= 1 << 26
	}
}

func (m *Model) updateStatus() {
	s := uint32(1<<0 | 2<<6) // FD, 1000 Mb/s; GIO master enable is computed on read
	m.phy[1] &^= 1 << 2
	if !m.opts.LinkDown {
		s |= 1 << 1
		m.phy[1] |= 1 << 2
	}
	m.reg[rSTATUS] = s
}

// Read32 implements mmio.Regs (BAR0).
func (m *Model) Read32(off uint32) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off&3 != 0 || off >= 128<<10 {
		m.violate("BAR0 read at %#x", off)
		return 0xFFFFFFFF
	}
	if off != rCTRL && off != rSTATUS && off != rEECD && off != rEXTCNF {
		m.checkAccess("read", off)
	}
	switch {
	case off == rSTATUS:
		v := m.reg[rSTATUS]
		if m.reg[rCTRL]&ctrlGIOMasterDisable == 0 {
			v |= statusGIOMasterEnable
		}
		return v
	case off == rEECD:
		v := m.reg[rEECD] | eecdPres
		if m.autoReadDone() {
			v |= eecdAutoRD
		}
		return v
	case off == rCTRL:
		if m.reg[rCTRL]&(1<<26) != 0 && !m.opts.ResetStuck {
			if m.resetCnt <= 0 {
				m.reg[rCTRL] &^= 1 << 26
			}
			m.resetCnt--
		}
	case off == rICR:
		v := m.reg[rICR]
		if v&m.reg[rIMS] != 0 {
			v |= 1 << 31
		}
		m.reg[rICR] = 0
		m.fn.SetINTx(false)
		return v
	case off >= 0x4000 && off < 0x4100:
		switch off {
		case sGORCL, sGOTCL:
			return uint32(m.stats[off])
		case sGORCH, sGOTCH:
			v := uint32(m.stats[off-4] >> 32)
			m.stats[off-4] = 0
			return v
		}
		v := m.stats[off]
		m.stats[off] = 0
		return uint32(v)
	}
	return m.reg[off]
}

// Write32 implements mmio.Regs (BAR0).
func (m *Model) Write32(off, v uint32) {
	m.mu.Lock()
	if off&3 != 0 || off >= 128<<10 {
		m.violate("BAR0 write at %#x", off)
		m.mu.Unlock()
		return
	}
	if off != rEXTCNF {
		m.checkAccess("write", off)
	}
	switch off {
	case rCTRL:
		if v&(1<<26) != 0 {
			if m.reg[rCTRL]&ctrlGIOMasterDisable == 0 {
				m.violate("CTRL.RST with GIO master requests enabled (CTRL.GIO_MASTER_DISABLE clear): a TLP pending at the reset may stick the PCIe bus (Linux e1000_reset_hw_82571 calls e1000e_disable_pcie_master first)")
			}
			m.reset()
			m.resetCnt = m.opts.ResetPolls
			m.resetting, m.resetAt = true, m.now()
			m.reg[rCTRL] = v &^ ctrlGIOMasterDisable
			if m.opts.ResetPolls == 0 && !m.opts.ResetStuck {
				m.reg[rCTRL] &^= 1 << 26
			}
			m.fn.SetINTx(false)
			break
		}
		if v&(1<<31) != 0 { // CTRL.PHY_RST
			m.phyReset()
			v &^= 1 << 31
		}
		m.reg[rCTRL] = v
	case rSTATUS: // read-only
	case rICR: // write 1 to clear
		m.reg[rICR] &^= v
		m.updateIRQ(false)
	case rEERD:
		if v&1 != 0 && !m.opts.NoNVM {
			a := v >> 2 & 0x3FFF
			var d uint16
			if a < uint32(len(m.nvm)) {
				d = m.nvm[a]
			}
			m.reg[rEERD] = uint32(d)<<16 | a<<2 | 2
		} else {
			m.reg[rEERD] = v &^ 2
		}
	case rMDIC:
		m.mdic(v)
	case rICS:
		m.cause(v)
	case rIMS:
		m.reg[rIMS] |= v
		m.updateIRQ(true)
	case rIMC:
		m.reg[rIMS] &^= v
		m.updateIRQ(false)
	case rRDT:
		n := uint32(m.ringLen(rRDLEN))
		if v >= n && n > 0 {
			m.violate("RDT %d outside a ring of %d descriptors", v, n)
			break
		}
		if m.reg[rRCTL]&2 != 0 && !handOK(m.reg[rRDT], v, m.reg[rRDH], n) {
			m.violate("RDT moved from %d to %d past RDH %d: descriptors the device filled and the driver has not taken would be overwritten or lost", m.reg[rRDT], v, m.reg[rRDH])
		}
		m.reg[rRDT] = v
	case rTDT:
		n := uint32(m.ringLen(rTDLEN))
		if v >= n {
			m.violate("TDT %d outside a ring of %d descriptors", v, n)
			break
		}
		old := m.reg[rTDT]
		if !handOK(old, v, m.reg[rTDH], n) {
			m.violate("TDT moved from %d to %d past TDH %d: descriptors the device still owns handed over again", old, v, m.reg[rTDH])
		}
		m.reg[rTDT] = v
		if !m.opts.ManualTX {
			m.processTX()
			break
		}
		// Remember what the driver handed over, to catch it rewriting a
		// descriptor the device owns before ProcessTX fetches it.
		if m.owned == nil {
			m.owned = map[uint32][4]uint32{}
		}
		for i := old; i != v; i = (i + 1) % n {
			if dw := m.desc(m.ringBase(rTDBAL) + dma.Addr(16*i)); dw != nil {
				m.owned[i] = [4]uint32{load(&dw[0]), load(&dw[1]), load(&dw[2]), load(&dw[3])}
			}
		}
	case rRCTL:
		m.reg[rRCTL] = v
		if v&2 != 0 {
			m.checkRing("RX", rRDBAL, rRDLEN)
			if m.reg[rRFCTL]&(1<<15) == 0 {
				m.violate("receiver enabled with legacy RX descriptors (RFCTL.EXTEN clear): not modelled")
			}
			if v&(3<<10) != 0 {
				m.violate("RCTL.DTYP %d (packet split): not modelled", v>>10&3)
			}
		}
	case rTCTL:
		m.reg[rTCTL] = v
		if v&2 != 0 {
			m.checkRing("TX", rTDBAL, rTDLEN)
			m.checkInitBits()
		}
	default:
		if off >= 0x4000 && off < 0x4100 {
			break // statistics are read-only
		}
		m.reg[off] = v
	}
	out, frames := m.out, m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, f := range frames {
		if out != nil {
			out(f)
		}
	}
}

// handOK reports whether moving a tail from old to v hands over only
// descriptors the driver owns: the device owns [head, old), so at most the
// ring minus one may be handed over and the tail must not reach the head
// from behind (head == old: the device owns none, any move is fine).
func handOK(old, v, head, n uint32) bool {
	if n == 0 || head == old {
		return true
	}
	return (v-old+n)%n < (head-old+n)%n
}

func (m *Model) ringLen(lenReg uint32) int { return int(m.reg[lenReg] / 16) }

func (m *Model) ringBase(baseReg uint32) dma.Addr {
	return dma.Addr(uint64(m.reg[baseReg]) | uint64(m.reg[baseReg+4])<<32)
}

func (m *Model) checkRing(what string, base, ln uint32) {
	if b := m.ringBase(base); b&15 != 0 {
		m.violate("%s ring base %#x not 16-byte aligned", what, b)
	}
	if l := m.reg[ln]; l == 0 || l%128 != 0 {
		m.violate("%s ring length %d not a non-zero multiple of 128", what, l)
	}
}

func (m *Model) mdic(v uint32) {
	reg, phy, op := v>>16&31, v>>21&31, v>>26&3
	r := v&0xFFFF | reg<<16 | phy<<21 | op<<26 | 1<<28
	switch {
	case phy != 1:
		r |= 1 << 30
	case op == 2:
		r = r&^0xFFFF | uint32(m.phy[reg])
	case op == 1 && reg == 0 && v&(1<<15) != 0:
		// BMCR.Reset (IEEE 802.3 22.2.4.1.1), self-clearing: the PHY
		// returns to its defaults, which ends a hang.
		m.phy[0] = uint16(v) &^ (1 << 15)
		m.phyReset()
	case op == 1:
		if reg != 1 && reg != 2 && reg != 3 && reg != phyStatus1000T && reg != phyRxErrCount {
			m.phy[reg] = uint16(v)
		}
	default:
		r |= 1 << 30
	}
	m.reg[rMDIC] = r
}

// cause sets interrupt causes.
func (m *Model) cause(c uint32) {
	m.reg[rICR] |= c
	m.updateIRQ(c&m.reg[rIMS] != 0)
}

func (m *Model) updateIRQ(edge bool) {
	pend := m.reg[rICR]&m.reg[rIMS] != 0
	cfg := m.fn.Config()
	msi := false
	for p := int(cfg[0x34]); p >= 0x40 && p < 0xFF; p = int(cfg[p+1]) {
		if cfg[p] == 0x05 {
			msi = cfg[p+2]&1 != 0
			break
		}
	}
	if msi {
		if pend && edge {
			m.mu.Unlock()
			err := m.fn.SignalMSI()
			m.mu.Lock()
			if err != nil {
				m.violate("MSI: %v", err)
			}
			m.st.MSIs++
			m.notify()
		}
		return
	}
	m.fn.SetINTx(pend)
	if pend {
		m.notify()
	}
}

func (m *Model) notify() {
	select {
	case m.irq <- struct{}{}:
	default:
	}
}
