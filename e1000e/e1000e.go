// Package e1000e drives the Intel 82574L Gigabit Ethernet controller (PCI
// 8086:10d3, QEMU's "e1000e") behind the DesignWare PCIe root complex of
// package pcie: reset, the MAC address from the NVM (EERD) or RAL0/RAH0,
// link state from STATUS and the PHY through MDIC, receive address and
// multicast filters, extended RX descriptors with checksum verdicts, TX
// data descriptors gathering a frame's fragments in place, checksum
// insertion and TCP segmentation (IPv4 and IPv6) in hardware through
// context descriptors, interrupts (INTx or MSI, serviced by Interrupt) or
// polling, the statistics registers, and a loopback self-test
// (SelfTest, in MAC loopback: SetLoopback).
//
// The NIC implements netstack.Device directly, with Segmentation done by
// the controller: a GSO packet costs one context descriptor, one header
// descriptor (the header copied into a slot the driver owns, because the
// driver rewrites its length and checksum fields as the hardware wants
// them) and one data descriptor per payload view, referenced in place.
//
// Register access goes through mmio.Regs (a pcie.Window on the board, the
// e1000etest model on the host) and memory through dma.Memory.
package e1000e

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// Errors; every error the driver returns wraps one of these.
var (
	ErrRingFull  = errors.New("e1000e: TX ring full")
	ErrTimeout   = errors.New("e1000e: hardware did not respond in time")
	ErrClosed    = errors.New("e1000e: closed")
	ErrFrame     = errors.New("e1000e: bad frame")
	ErrRxFrame   = errors.New("e1000e: received frame dropped")
	ErrConfig    = errors.New("e1000e: bad configuration")
	ErrPHY       = errors.New("e1000e: PHY access failed")
	ErrNoBuffers = errors.New("e1000e: no spare RX buffer")
	ErrReset     = errors.New("e1000e: aborted by an adapter reset")
	ErrLinkDown  = errors.New("e1000e: PCIe link down")
)

// Config configures a NIC.
type Config struct {
	Regs mmio.Regs  // BAR0 (128 KiB)
	Mem  dma.Memory // rings (Coherent) and RX buffers (Cached)
	// MAC, when non-zero, replaces the NVM's address.
	MAC [6]byte
	// RxRing and TxRing are descriptor counts, multiples of 8 (defaults
	// 256 and 512).
	RxRing, TxRing int
	// RxSpare is the number of RX buffers beyond the ring, lent to frames
	// handed up until they are released (default 128).
	RxSpare int
	// Interrupts enables the controller's interrupt causes (RX, TX
	// write-back, link change); the board routes INTx or MSI to
	// Interrupt. Without it, call Poll.
	Interrupts bool
	// OnTxDone is called once per frame or GSO packet when the hardware
	// is done with its memory (err is ErrClosed for frames aborted by
	// Close).
	OnTxDone func(cookie any, err error)
	// Nanotime and Delay bound register waits (reset, EERD, MDIC).
	// Defaults: the host clock.
	Nanotime func() int64
	Delay    func(time.Duration)
}

// Stats are the driver's counters.
type Stats struct {
	Tx struct {
		Frames, Bytes       uint64 // frames queued (GSO packets count as one) and their bytes
		Descs               uint64 // descriptors used, context descriptors included
		Contexts            uint64 // context descriptors
		GSOPackets, GSOSegs uint64 // GSO packets given to the hardware and the segments they become
		CsumFrames          uint64 // frames with checksum insertion
		Completed           uint64
		Copied              uint64 // bytes copied: GSO headers, into the driver's header slots
		RingFull, Errors    uint64 // refused for space; refused as malformed
	}
	Rx struct {
		Frames, Bytes  uint64
		Errors         uint64 // CRC, symbol, sequence, carrier extension, RX data errors
		Multi          uint64 // frames spanning buffers (never expected: LPE is off)
		NoBuffer       uint64 // a frame had to be dropped: no spare buffer
		CsumIP, CsumL4 uint64 // frames whose checksums the hardware verified good
		CsumBad        uint64 // frames the hardware flagged with a checksum error (handed up unverified)
		// ResetDropped: frames the controller had written but the
		// driver had not received when a Reset took the ring back.
		ResetDropped uint64
	}
	Interrupts, Polls uint64
	LinkChanges       uint64
	// Resets counts completed MAC resets; MasterTimeouts the resets
	// issued although GIO master requests had not drained in 80 ms (as
	// Linux, which only logs it); PHYHangs the times Watchdog found the
	// PHY hung twice in a row and reset the adapter.
	Resets, MasterTimeouts, PHYHangs uint64
}

// HWStats are the statistics registers, accumulated (they clear on read).
type HWStats struct {
	CRCErrors, AlignErrors, RxErrors, Missed, Collisions, LengthErrors uint64
	GoodRx, BroadcastRx, MulticastRx, GoodTx                           uint64
	GoodRxOctets, GoodTxOctets                                         uint64
	NoBuffers, Undersize, Oversize                                     uint64
	TotalRx, TotalTx, MulticastTx, BroadcastTx                         uint64
	TSOContexts, TSOContextFailures                                    uint64
}

// NIC is one 82574L.
type NIC struct {
	cfg Config
	r   mmio.Regs
	mac [6]byte

	phyMu sync.Mutex // one MDIC transaction at a time (ReadPHY, WritePHY)

	txMu sync.Mutex
	tx   txRing
	cbMu sync.Mutex // completions in delivery (reclaim, Close)
	rxMu sync.Mutex
	rx   rxRing

	rxReady chan struct{}
	closed  atomic.Bool
	link    atomic.Bool

	// filtMu guards the receive filters the driver holds to restore
	// after a Reset: the multicast table and RCTL.UPE/MPE.
	filtMu    sync.Mutex
	mta       [128]uint32
	rctlFlags uint32
	// loop: the MAC is in loopback (SetLoopback), which configure puts
	// back after a Reset; loopCtrl holds the CTRL link bits it replaced.
	loop     bool
	loopCtrl uint32

	phyHangs atomic.Int32 // consecutive Watchdog checks that found the PHY hung
	// hwMu keeps Interrupt, Poll and HWStats, which the interrupt loop
	// and /stats call at any time, off the registers while Reset runs
	// (held for writing): between CTRL.RST and EECD.AUTO_RD no MAC
	// register may be read (Linux masks and synchronises its interrupt
	// before its reset task resets).
	hwMu sync.RWMutex

	statsMu sync.Mutex
	stats   Stats
	hw      HWStats
}

// New checks cfg and allocates rings and buffers; Init starts the device.
func New(cfg Config) (*NIC, error) {
	if cfg.Regs == nil || cfg.Mem == nil {
		return nil, fmt.Errorf("e1000e: Regs and Mem are required: %w", ErrConfig)
	}
	if cfg.RxRing == 0 {
		cfg.RxRing = 256
	}
	if cfg.TxRing == 0 {
		cfg.TxRing = 512
	}
	if cfg.RxSpare == 0 {
		cfg.RxSpare = 128
	}
	for _, n := range []int{cfg.RxRing, cfg.TxRing} {
		// RDLEN/TDLEN: multiples of 128 bytes, at most 64 K descriptors.
		if n < 8 || n%8 != 0 || n > 65536 {
			return nil, fmt.Errorf("e1000e: ring of %d descriptors (multiple of 8 wanted): %w", n, ErrConfig)
		}
	}
	if cfg.Nanotime == nil {
		cfg.Nanotime = func() int64 { return time.Now().UnixNano() }
	}
	if cfg.Delay == nil {
		cfg.Delay = time.Sleep
	}
	n := &NIC{cfg: cfg, r: cfg.Regs, rxReady: make(chan struct{}, 1)}
	if err := n.tx.alloc(cfg.Mem, cfg.TxRing); err != nil {
		return nil, err
	}
	if err := n.rx.alloc(cfg.Mem, cfg.RxRing, cfg.RxSpare); err != nil {
		return nil, err
	}
	return n, nil
}

// wait polls cond every step until it holds or d has passed.
func (n *NIC) wait(d, step time.Duration, cond func() bool) bool {
	end := n.cfg.Nanotime() + int64(d)
	for {
		if cond() {
			return true
		}
		if n.cfg.Nanotime() > end {
			return cond()
		}
		n.cfg.Delay(step)
	}
}

// Init resets the controller and starts it: MAC address, filters, RX and
// TX rings, checksum offload, interrupts. The link comes up on its own
// (auto-negotiation); Link reports it.
func (n *NIC) Init() error {
	if err := n.resetHW(); err != nil {
		return err
	}
	if err := n.readMAC(); err != nil {
		return err
	}
	n.configure()
	return nil
}

// configure programs a controller fresh from resetHW: Linux's 82574 init
// bits, the station address, the multicast table and receive filter
// flags the driver holds, link, statistics cleared, the RX and TX rings
// (every descriptor the driver's), interrupts. Init and Reset share it.
func (n *NIC) configure() {
	n.initBits()
	n.setRAR(n.mac)
	n.filtMu.Lock()
	for i := range n.mta {
		n.r.Write32(MTA+4*uint32(i), n.mta[i])
	}
	n.filtMu.Unlock()
	n.r.Write32(CTRL, n.r.Read32(CTRL)|ctrlSLU|ctrlFD)
	n.clearHWStats()
	n.rx.start(n)
	n.filtMu.Lock()
	if n.rctlFlags != 0 {
		n.r.Write32(RCTL, n.r.Read32(RCTL)|n.rctlFlags)
	}
	if n.loop {
		n.loopOnLocked()
	}
	n.filtMu.Unlock()
	n.tx.start(n)
	n.link.Store(n.r.Read32(STATUS)&statusLU != 0)
	if n.cfg.Interrupts {
		n.r.Write32(IMS, imsWanted)
	}
}

// readMAC reads words 0-2 of the NVM through EERD; if the NVM does not
// answer, RAL0/RAH0 (loaded from it at reset) are used when valid.
// Config.MAC overrides both.
func (n *NIC) readMAC() error {
	if n.cfg.MAC != ([6]byte{}) {
		n.mac = n.cfg.MAC
		return nil
	}
	var m [6]byte
	ok := true
	for w := 0; w < 3 && ok; w++ {
		v, err := n.ReadNVM(w)
		if err != nil {
			ok = false
			break
		}
		m[2*w], m[2*w+1] = byte(v), byte(v>>8)
	}
	if !ok || !validMAC(m) {
		lo, hi := n.r.Read32(RAL0), n.r.Read32(RAH0)
		if hi&rahAV == 0 {
			return fmt.Errorf("e1000e: no MAC address in the NVM or RAL0/RAH0: %w", ErrConfig)
		}
		m = [6]byte{byte(lo), byte(lo >> 8), byte(lo >> 16), byte(lo >> 24), byte(hi), byte(hi >> 8)}
		if !validMAC(m) {
			return fmt.Errorf("e1000e: RAL0/RAH0 address %x invalid: %w", m, ErrConfig)
		}
	}
	n.mac = m
	return nil
}

func validMAC(m [6]byte) bool { return m[0]&1 == 0 && m != ([6]byte{}) }

// ReadNVM reads one 16-bit NVM word through EERD.
func (n *NIC) ReadNVM(word int) (uint16, error) {
	n.r.Write32(EERD, uint32(word)<<eerdAddrShift|eerdStart)
	var v uint32
	if !n.wait(10*time.Millisecond, 5*time.Microsecond, func() bool { v = n.r.Read32(EERD); return v&eerdDone != 0 }) {
		return 0, fmt.Errorf("e1000e: EERD word %d: %w", word, ErrTimeout)
	}
	return uint16(v >> eerdDataShift), nil
}

// MAC returns the station address.
func (n *NIC) MAC() [6]byte { return n.mac }

func (n *NIC) setRAR(m [6]byte) {
	n.r.Write32(RAL0, uint32(m[0])|uint32(m[1])<<8|uint32(m[2])<<16|uint32(m[3])<<24)
	n.r.Write32(RAH0, uint32(m[4])|uint32(m[5])<<8|rahAV)
}

// mtaHash is the 12-bit multicast hash for RCTL.MO = 00: address bits
// 47:36 (Linux e1000_hash_mc_addr_generic with a 4096-bit table).
func mtaHash(m [6]byte) uint32 { return (uint32(m[4])>>4 | uint32(m[5])<<4) & 0xFFF }

// AddMulticast sets the group's bit in the multicast table (kept by the
// driver too, so a Reset puts it back).
func (n *NIC) AddMulticast(m [6]byte) {
	h := mtaHash(m)
	n.filtMu.Lock()
	n.mta[h>>5] |= 1 << (h & 31)
	n.r.Write32(MTA+4*(h>>5), n.mta[h>>5])
	n.filtMu.Unlock()
}

// SetAllMulticast accepts every multicast frame (RCTL.MPE), or only
// those the table selects.
func (n *NIC) SetAllMulticast(on bool) { n.rctl(rctlMPE, on) }

// SetPromiscuous accepts every unicast frame (RCTL.UPE).
func (n *NIC) SetPromiscuous(on bool) { n.rctl(rctlUPE, on) }

func (n *NIC) rctl(bit uint32, on bool) {
	n.filtMu.Lock()
	defer n.filtMu.Unlock()
	n.rctlFlags &^= bit
	v := n.r.Read32(RCTL) &^ bit
	if on {
		v |= bit
		n.rctlFlags |= bit
	}
	n.r.Write32(RCTL, v)
}

// The 82574's PHY pages registers 16-31 (Linux phy.h
// MAX_PHY_MULTI_PAGE_REG, BM_PHY_PAGE_SELECT).
const (
	phyMaxMultiPageReg = 0x0F
	phyPageSelect      = 22
)

// ReadPHY reads a PHY register of page 0 through MDIC. For registers 16-31
// page 0 is selected first, as Linux's 82574 PHY access does
// (phy.c e1000e_read_phy_reg_bm2 writes the page to BM_PHY_PAGE_SELECT for
// any register above MAX_PHY_MULTI_PAGE_REG): the page register may have
// been left elsewhere by the NVM's PHY configuration or a boot loader.
func (n *NIC) ReadPHY(reg int) (uint16, error) {
	// One PHY access at a time, page select and access together: the
	// watchdog, Reset and /debug/regs read beside each other, and MDIC
	// holds one transaction (Linux serialises them too, phy.ops.acquire).
	n.phyMu.Lock()
	defer n.phyMu.Unlock()
	if err := n.phyPage(reg); err != nil {
		return 0, err
	}
	v, err := n.mdic(uint32(reg&31)<<mdicRegShift | phyAddr<<mdicPHYShift | mdicOpRead)
	return uint16(v), err
}

// WritePHY writes a PHY register of page 0 through MDIC (see ReadPHY;
// e1000e_write_phy_reg_bm2).
func (n *NIC) WritePHY(reg int, val uint16) error {
	n.phyMu.Lock()
	defer n.phyMu.Unlock()
	if err := n.phyPage(reg); err != nil {
		return err
	}
	_, err := n.mdic(uint32(val) | uint32(reg&31)<<mdicRegShift | phyAddr<<mdicPHYShift | mdicOpWrite)
	return err
}

// phyPage selects page 0 before an access to a paged register.
func (n *NIC) phyPage(reg int) error {
	if reg&31 <= phyMaxMultiPageReg {
		return nil
	}
	if _, err := n.mdic(phyPageSelect<<mdicRegShift | phyAddr<<mdicPHYShift | mdicOpWrite); err != nil {
		return fmt.Errorf("e1000e: PHY page select: %w", err)
	}
	return nil
}

func (n *NIC) mdic(cmd uint32) (uint32, error) {
	n.r.Write32(MDIC, cmd)
	var v uint32
	if !n.wait(10*time.Millisecond, 5*time.Microsecond, func() bool { v = n.r.Read32(MDIC); return v&mdicReady != 0 }) {
		return 0, fmt.Errorf("e1000e: MDIC %#x: %w", cmd, ErrTimeout)
	}
	if v&mdicError != 0 {
		return 0, fmt.Errorf("e1000e: MDIC %#x: error %#x: %w", cmd, v, ErrPHY)
	}
	return v, nil
}

// Link is the link state.
type Link struct {
	Up         bool
	Mbps       int
	FullDuplex bool
}

// Link reads STATUS.
func (n *NIC) Link() Link {
	s := n.r.Read32(STATUS)
	l := Link{Up: s&statusLU != 0, FullDuplex: s&statusFD != 0}
	l.Mbps = [4]int{10, 100, 1000, 1000}[s>>statusSpeedShift&3]
	return l
}

// MaxFrame is the longest frame without FCS: 1518 (RCTL.LPE off, one VLAN tag).
func (n *NIC) MaxFrame() int { return 1518 }

// Interrupt services the controller: it reads ICR (which clears it and
// deasserts INTx), reclaims completed TX descriptors and signals RxReady.
// It returns the causes read.
func (n *NIC) Interrupt() uint32 {
	n.hwMu.RLock()
	defer n.hwMu.RUnlock()
	icr := n.r.Read32(ICR)
	n.count(func(s *Stats) { s.Interrupts++ })
	n.service(icr)
	return icr
}

// Poll services the controller without interrupts (ICR is not read, so
// interrupts stay pending for Interrupt).
func (n *NIC) Poll() {
	n.hwMu.RLock()
	defer n.hwMu.RUnlock()
	n.count(func(s *Stats) { s.Polls++ })
	n.service(IntTXDW | IntRXT0 | IntLSC)
}

func (n *NIC) service(icr uint32) {
	if icr&IntLSC != 0 {
		up := n.r.Read32(STATUS)&statusLU != 0
		if n.link.Swap(up) != up {
			n.count(func(s *Stats) { s.LinkChanges++ })
		}
	}
	if icr&(IntTXDW|IntTXQE) != 0 {
		n.reclaim()
	}
	if icr&(IntRXT0|IntRXDMT0|IntRXO) != 0 {
		n.signal()
	}
}

func (n *NIC) signal() {
	select {
	case n.rxReady <- struct{}{}:
	default:
	}
}

// RxReady is signalled when frames may be waiting.
func (n *NIC) RxReady() <-chan struct{} { return n.rxReady }

func (n *NIC) count(f func(*Stats)) {
	n.statsMu.Lock()
	f(&n.stats)
	n.statsMu.Unlock()
}

// Stats returns the driver's counters.
func (n *NIC) Stats() Stats {
	n.statsMu.Lock()
	defer n.statsMu.Unlock()
	return n.stats
}

func (n *NIC) clearHWStats() {
	for off := uint32(0x4000); off < 0x4100; off += 4 {
		_ = n.r.Read32(off)
	}
}

// HWStats reads the statistics registers (clear on read) and returns the
// totals since Init.
func (n *NIC) HWStats() HWStats {
	n.hwMu.RLock()
	defer n.hwMu.RUnlock()
	n.statsMu.Lock()
	defer n.statsMu.Unlock()
	h := &n.hw
	rd := func(off uint32) uint64 { return uint64(n.r.Read32(off)) }
	h.CRCErrors += rd(CRCERRS)
	h.AlignErrors += rd(ALGNERRC)
	h.RxErrors += rd(RXERRC)
	h.Missed += rd(MPC)
	h.Collisions += rd(COLC)
	h.LengthErrors += rd(RLEC)
	h.GoodRx += rd(GPRC)
	h.BroadcastRx += rd(BPRC)
	h.MulticastRx += rd(MPRC)
	h.GoodTx += rd(GPTC)
	// The octet counters clear when the high half is read: low first.
	h.GoodRxOctets += rd(GORCL) | rd(GORCH)<<32
	h.GoodTxOctets += rd(GOTCL) | rd(GOTCH)<<32
	h.NoBuffers += rd(RNBC)
	h.Undersize += rd(RUC)
	h.Oversize += rd(ROC)
	h.TotalRx += rd(TPR)
	h.TotalTx += rd(TPT)
	h.MulticastTx += rd(MPTC)
	h.BroadcastTx += rd(BPTC)
	h.TSOContexts += rd(TSCTC)
	h.TSOContextFailures += rd(TSCTFC)
	return *h
}

// Close stops the receiver and transmitter, masks interrupts, and
// completes every frame still in flight with ErrClosed; it returns only
// once every completion, its own and any a concurrent Interrupt or Poll
// was delivering, has been delivered. RX buffers held by
// frames not yet released stay valid until released.
func (n *NIC) Close() error {
	if n.closed.Swap(true) {
		return nil
	}
	n.hwMu.Lock() // not in the middle of a Reset
	n.r.Write32(IMC, 0xFFFFFFFF)
	n.r.Write32(RCTL, 0)
	n.r.Write32(TCTL, tctlPSP)
	n.hwMu.Unlock()
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.txMu.Lock()
	done := n.tx.abort(n.cfg.Mem)
	cb := n.cfg.OnTxDone
	n.txMu.Unlock()
	for _, d := range done {
		if cb != nil {
			cb(d, ErrClosed)
		}
	}
	return nil
}
