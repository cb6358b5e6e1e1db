package fec

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// Interface is the MAC-PHY interface.
type Interface int

// MAC-PHY interfaces.
const (
	RMII Interface = iota
	RGMII
	MII
)

// Config configures a NIC. Zero fields take the documented defaults.
type Config struct {
	Regs mmio.Regs
	Mem  dma.Memory
	Caps Caps
	MAC  [6]byte
	// Interface selects RMII (default), RGMII or MII.
	Interface Interface
	// TxRing and RxRing are descriptor counts (default 512 and 256: a 64 KiB
	// TSO packet at MSS 536 needs up to 250 TX descriptors).
	TxRing, RxRing int
	// RxSpare is the number of extra RX buffers that back zero-copy
	// hand-off of frames above the copybreak (default RxRing).
	RxSpare int
	// Packets bounds received packets held by the caller at once (default
	// RxSpare + RxRing).
	Packets int
	// MaxFrame is the longest frame without FCS (default 1518: a
	// VLAN-tagged 1500-byte MTU). At most Caps.MaxFrame.
	MaxFrame int
	// Strategy is the initial TX placement strategy. The zero value is
	// bounce.Bounce (every frame copied whole); set bounce.SG for
	// scatter-gather with two-descriptor header alignment.
	Strategy bounce.Strategy
	// Copybreak is the initial RX copybreak in bytes; frames up to it are
	// copied and the ring buffer reposted at once. Default DefaultCopybreak;
	// negative disables it.
	Copybreak int
	// MaxTxDescs bounds the descriptors of one frame (default 32).
	MaxTxDescs int
	// Interrupts selects interrupt-driven operation: EIMR enables TXF, RXF
	// and EBERR and the platform calls Interrupt from its handler. Otherwise
	// the caller polls with Poll.
	Interrupts bool
	// LegacyBD forces 8-byte legacy descriptors (no checksum offload, no
	// SHIFT16). Forced on when Caps lack QuirkEnhancedBD.
	LegacyBD bool
	// IPGClock is the ENET module clock (ipg_clk) in Hz from which MDC is
	// divided (default 66 MHz, the i.MX6UL IPG clock). A board whose clock
	// differs must set it, or MDC leaves the 2.5 MHz IEEE 802.3 clause 22
	// limit; New rejects a clock the 6-bit MII_SPEED cannot divide down.
	IPGClock uint32
	// MDIOTimeout bounds one MDIO transaction (default 30 ms, as Linux).
	MDIOTimeout time.Duration
	// OnTxDone is called once per frame given to Transmit, after the
	// hardware has finished with its memory (err nil) or the frame was
	// aborted by a reset (err wraps ErrAborted). It runs without driver
	// locks held and may call Transmit.
	OnTxDone func(cookie any, err error)
}

// DefaultCopybreak is the RX copybreak default: frames (without FCS) up
// to 512 bytes are copied. Chosen in docs/copybreak.md from the guest's
// instructions per datagram across the thresholds (copying and zero-copy
// within 0.5% of each other at every size) and the memory a held frame
// keeps (BenchmarkRxCopybreak): up to 510 bytes a copy holds a third or
// less of the 1,536-byte DMA buffer (511 and 512, with the SHIFT16 pad,
// two thirds); above it, two thirds or more, for a copy of up to 1 KiB.
const DefaultCopybreak = 512

// Errors.
var (
	ErrRingFull     = errors.New("fec: TX ring full")
	ErrFrameTooLong = errors.New("fec: frame too long")
	ErrFrameShort   = errors.New("fec: frame shorter than an Ethernet header")
	ErrNoCsum       = errors.New("fec: checksum insertion not available")
	ErrCsumHeader   = errors.New("fec: checksum offload needs the L2-L4 headers in the first fragment")
	ErrAborted      = errors.New("fec: frame aborted by MAC reset")
	ErrTxFailed     = errors.New("fec: transmit error")
	ErrBusError     = errors.New("fec: DMA bus error (EBERR); MAC restarted")
	ErrNoRxBuffer   = errors.New("fec: no spare RX buffer; frame dropped")
	ErrNotPeekable  = errors.New("fec: the next RX frame is not a good frame Peek shows")
	ErrTimeout      = errors.New("fec: timeout")
	ErrClosed       = errors.New("fec: NIC closed")
	ErrReleased     = errors.New("fec: packet released twice")
	ErrNot32Bit     = errors.New("fec: DMA address above 4 GiB")
	ErrNoPHY        = errors.New("fec: no PHY answers")
)

// NIC is one ENET instance. It is safe for concurrent use: TX and RX take
// separate locks.
type NIC struct {
	cfg      Config
	regs     mmio.Regs
	mem      dma.Memory
	enhanced bool
	shift16  bool
	rxBufLen int
	// Set once from cfg.Caps: Caps.Has on the per-frame paths copied the
	// whole Caps struct each time (a runtime.duffcopy call on GOARM=7).
	csum, err007885 bool

	ctl sync.Mutex // serialises restart and MDIO against each other
	// phyAddr is the address of the PHY StartLink took, when phyTaken,
	// for the register dump.
	phyAddr  atomic.Int32
	phyTaken atomic.Bool
	// phyLooped is set while the self-test has the PHY in loopback:
	// PollLink leaves the PHY and the MAC alone meanwhile. pollMu is held
	// by PollLink for its whole run and by the self-test while it sets
	// or clears phyLooped, so no poll straddles the change.
	phyLooped atomic.Bool
	pollMu    sync.Mutex
	// phyRestore, when pending, is the BMCR value a self-test could not
	// write back to its PHY to take it out of loopback, and the link the
	// driver had; the link watch retries it (under pollMu, phyLooped
	// still set).
	phyRestore struct {
		pending bool
		addr    int
		bmcr    uint16
		link    Link
	}
	// loop puts the MAC in internal loopback at the next restart
	// (SetLoopback); under ctl.
	loop bool
	// aborted holds the completions of frames a restart aborted while ctl
	// was held, for unlockCtl to report once ctl is released.
	aborted *[]txDone
	link    Link
	mcast   [2]uint32 // GAUR, GALR
	closed  bool

	tx txRing
	rx rxRing

	rxReady chan struct{}
	ev      evStats
	mib0    [mibCount]uint32 // MIB values at the last restart
}

// New allocates rings and buffers and returns a NIC that has not touched
// the hardware yet; call Init.
func New(cfg Config) (*NIC, error) {
	if cfg.Regs == nil || cfg.Mem == nil {
		return nil, errors.New("fec: Config.Regs and Config.Mem are required")
	}
	if cfg.Caps.Name == "" {
		return nil, errors.New("fec: Config.Caps is required (see CapsFor)")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.TxRing, 512)
	def(&cfg.RxRing, 256)
	def(&cfg.RxSpare, cfg.RxRing)
	def(&cfg.Packets, cfg.RxSpare+cfg.RxRing)
	def(&cfg.MaxFrame, 1518)
	def(&cfg.MaxTxDescs, 32)
	def(&cfg.Copybreak, DefaultCopybreak)
	if cfg.IPGClock == 0 {
		cfg.IPGClock = 66_000_000
	}
	if cfg.MDIOTimeout == 0 {
		cfg.MDIOTimeout = 30 * time.Millisecond
	}
	if (cfg.IPGClock+5_000_000-1)/5_000_000-1 > 63 {
		return nil, fmt.Errorf("fec: IPG clock %d Hz: MDC cannot be divided down to 2.5 MHz (MII_SPEED is 6 bits)", cfg.IPGClock)
	}
	if cfg.MaxFrame > cfg.Caps.MaxFrame || cfg.MaxFrame < 64 {
		return nil, fmt.Errorf("fec: MaxFrame %d outside 64..%d for %s", cfg.MaxFrame, cfg.Caps.MaxFrame, cfg.Caps.Name)
	}
	if cfg.TxRing < 4 || cfg.RxRing < 2 || cfg.MaxTxDescs > bounce.MaxSegs || cfg.MaxTxDescs > cfg.TxRing {
		return nil, fmt.Errorf("fec: ring sizes TX %d RX %d, %d descriptors per frame: out of range", cfg.TxRing, cfg.RxRing, cfg.MaxTxDescs)
	}
	n := &NIC{cfg: cfg, regs: cfg.Regs, mem: cfg.Mem, rxReady: make(chan struct{}, 1)}
	n.enhanced = cfg.Caps.Has(QuirkEnhancedBD) && !cfg.LegacyBD
	n.shift16 = n.enhanced && cfg.Caps.Has(QuirkRACC)
	n.csum = n.enhanced && cfg.Caps.Has(QuirkCsum)
	n.err007885 = cfg.Caps.Has(QuirkERR007885)
	// FCS and the SHIFT16 pad land in the buffer too.
	n.rxBufLen = dma.AlignUp(cfg.MaxFrame+4+2, 64)
	if err := n.tx.alloc(n); err != nil {
		return nil, err
	}
	if err := n.rx.alloc(n); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NIC) descSize() int {
	if n.enhanced {
		return EnhancedDescSize
	}
	return LegacyDescSize
}

// Caps returns the NIC's capability table entry.
func (n *NIC) Caps() Caps { return n.cfg.Caps }

// CsumOffload reports whether TX checksum insertion and RX verdicts work.
func (n *NIC) CsumOffload() bool { return n.csum }

// MaxFrame returns the longest frame (without FCS) the NIC sends or accepts.
func (n *NIC) MaxFrame() int { return n.cfg.MaxFrame }

// MaxTxDescs returns the most descriptors one frame may use.
func (n *NIC) MaxTxDescs() int { return n.cfg.MaxTxDescs }

// MAC returns the station address.
func (n *NIC) MAC() [6]byte { return n.cfg.MAC }

// Init resets the MAC and brings it up at 100 Mb/s full duplex (or the last
// link set), with rings empty.
func (n *NIC) Init() error {
	n.ctl.Lock()
	defer n.unlockCtl()
	if n.link.Speed == 0 {
		n.link = Link{Up: true, Speed: 100, FullDuplex: true}
	}
	return n.restartLocked()
}

// SetLink reprograms speed and duplex after autonegotiation. Like Linux it
// restarts the MAC: frames in flight complete with ErrAborted.
func (n *NIC) SetLink(l Link) error {
	if l.Speed == 1000 && !n.cfg.Caps.Has(QuirkGbit) {
		return fmt.Errorf("fec: %s has no 1000 Mb/s mode", n.cfg.Caps.Name)
	}
	n.ctl.Lock()
	defer n.unlockCtl()
	n.link = l
	return n.restartLocked()
}

// Link returns the link the MAC is programmed for.
func (n *NIC) Link() Link {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	return n.link
}

// restartLocked follows Linux's fec_restart order (reset, address, events,
// rings, ring registers, TCR, MSCR, RACC/FTRL, RCR, filters, TFWR, MIB,
// ECR, RDAR, EIMR). Called with ctl held; takes the TX and RX locks.
//
// The frames it aborts are reported by unlockCtl, after ctl is released:
// OnTxDone runs without driver locks held, so it may call Stats, Link or
// Transmit (a link change restarts the MAC from the link poll).
func (n *NIC) restartLocked() error {
	n.tx.mu.Lock()
	n.rx.mu.Lock()
	done, err := n.restartRingsLocked()
	n.rx.mu.Unlock()
	n.tx.mu.Unlock()
	n.deferDone(done)
	return err
}

// deferDone keeps completions taken while ctl is held for unlockCtl.
func (n *NIC) deferDone(done *[]txDone) {
	switch {
	case done == nil:
	case n.aborted == nil:
		n.aborted = done
	default:
		*n.aborted = append(*n.aborted, *done...)
		clear(*done)
		*done = (*done)[:0]
		n.tx.pool.Put(done)
	}
}

// unlockCtl releases ctl, then reports the completions a restart deferred.
func (n *NIC) unlockCtl() {
	done := n.aborted
	n.aborted = nil
	n.ctl.Unlock()
	n.complete(done)
}

// resetPolls bounds the wait for ECR.RESET to clear itself: at about 100 ns
// a register read, 100 µs, ten times the udelay(10) Linux's fec_restart
// gives it without looking.
const resetPolls = 1000

// ErrResetTimeout is returned by Init, SetLink and the bus-error recovery
// when the MAC's reset did not complete (ECR.RESET still set after
// resetPolls reads): the ENET's clock is off, or the block is held in
// reset. The restart still goes through its steps, as Linux's does.
var ErrResetTimeout = errors.New("fec: MAC reset did not complete (ECR RESET still set): is the ENET clocked?")

func (n *NIC) restartRingsLocked() (*[]txDone, error) {
	r := n.regs
	var err error
	// 1. Reset. The multi-queue parts are stopped with ECR=0 instead (AXI).
	if n.cfg.Caps.Has(QuirkMultiQueue) {
		r.Write32(ENETx_ECR, 0)
	} else {
		r.Write32(ENETx_ECR, ECR_RESET)
		i := 0
		for ; i < resetPolls && r.Read32(ENETx_ECR)&ECR_RESET != 0; i++ {
		}
		if i == resetPolls {
			n.ev.resetTimeouts++
			err = ErrResetTimeout
		}
	}
	n.ev.restarts++
	// 2. Station address (reset clears it).
	m := n.cfg.MAC
	r.Write32(ENETx_PALR, uint32(m[0])<<24|uint32(m[1])<<16|uint32(m[2])<<8|uint32(m[3]))
	r.Write32(ENETx_PAUR, uint32(m[4])<<24|uint32(m[5])<<16|0x8808)
	// 3. Clear all events but MII.
	r.Write32(ENETx_EIR, ^uint32(EIR_MII))
	// 4. Rings: frames in flight are aborted.
	n.tx.reset(n)
	done := n.tx.takeDone()
	n.rx.reset(n)
	// 5. Ring registers.
	r.Write32(ENETx_RDSR, uint32(n.rx.desc.Addr()))
	r.Write32(ENETx_TDSR, uint32(n.tx.desc.Addr()))
	r.Write32(ENETx_MRBR, uint32(n.rxBufLen)&MRBR_R_BUF_SIZE_MASK)
	// 6. TCR.
	var tcr uint32
	if n.link.FullDuplex {
		tcr |= TCR_FDEN
	}
	r.Write32(ENETx_TCR, tcr)
	// 7. MDC: MII_SPEED = ceil(ipg / 5 MHz) - 1 (2.5 MHz MDC), HOLDTIME =
	// ceil(ipg / 100 MHz) - 1. Written only when it does not already hold
	// that value (a reset may clear it; ECR=0 on the multi-queue parts does
	// not), and MMFR is cleared first only then: writing MMFR while MSCR is
	// non-zero starts an MDIO frame, and writing MSCR from zero while MMFR
	// is non-zero raises a spurious MII event (Linux fec_enet_mii_init,
	// FEC_QUIRK_CLEAR_SETUP_MII).
	if want := n.mscr(); r.Read32(ENETx_MSCR) != want {
		if n.cfg.Caps.Has(QuirkClearSetupMII) && r.Read32(ENETx_MSCR)&0xFF == 0 {
			r.Write32(ENETx_MMFR, 0)
		}
		r.Write32(ENETx_MSCR, want)
	}
	// 7a. ECR=0 on the multi-queue parts resets nothing: clear what a boot
	// loader or an earlier driver may have left that changes ring 0's
	// behaviour (TX accelerator, interrupt coalescing, classification of
	// frames to rings 1/2 and their DMA classes).
	if n.cfg.Caps.Has(QuirkMultiQueue) {
		for _, reg := range []uint32{ENETx_TACC, ENETx_TXIC0, ENETx_TXIC1, ENETx_TXIC2, ENETx_RXIC0,
			ENETx_RXIC1, ENETx_RXIC2, ENETx_RCMR1, ENETx_RCMR2, ENETx_DMA1CFG, ENETx_DMA2CFG} {
			r.Write32(reg, 0)
		}
	}
	// 8. RX accelerator and truncation length.
	if n.cfg.Caps.Has(QuirkRACC) {
		var racc uint32
		if n.shift16 {
			racc |= RACC_SHIFT16
		}
		r.Write32(ENETx_RACC, racc)
	}
	r.Write32(ENETx_FTRL, uint32(n.cfg.MaxFrame+4))
	// 9. RCR, written whole (QEMU drops bits on read-back; reset has LOOP).
	r.Write32(ENETx_RCR, n.rcr())
	// 10. Filters.
	r.Write32(ENETx_IAUR, 0)
	r.Write32(ENETx_IALR, 0)
	r.Write32(ENETx_GAUR, n.mcast[0])
	r.Write32(ENETx_GALR, n.mcast[1])
	// 11. Store and forward (needed for checksum insertion).
	r.Write32(ENETx_TFWR, TFWR_STRFWD)
	// 12. MIB on; remember where the counters start.
	r.Write32(ENETx_MIBC, 0)
	for i, c := range mibTable {
		n.mib0[i] = r.Read32(c.off)
	}
	// 13. Enable.
	ecr := uint32(ECR_ETHEREN | ECR_DBSWP)
	if n.enhanced {
		ecr |= ECR_EN1588
	}
	if n.link.Speed == 1000 && !n.loop {
		// The loopback is MII (rcr), 10/100 only: 1000 Mb/s needs
		// RGMII_EN, which it clears (a review found SPEED kept).
		ecr |= ECR_SPEED
	}
	r.Write32(ENETx_ECR, ecr)
	n.mem.Barrier() // the RX descriptors published before RDAR (writel's barrier)
	r.Write32(ENETx_RDAR, DAR_ACTIVE)
	var eimr uint32
	if n.cfg.Interrupts {
		eimr = EIR_TXF | EIR_RXF | EIR_EBERR
	}
	r.Write32(ENETx_EIMR, eimr)
	return done, err
}

func (n *NIC) mscr() uint32 {
	ipg := n.cfg.IPGClock
	speed := (ipg+5_000_000-1)/5_000_000 - 1
	hold := (ipg+100_000_000-1)/100_000_000 - 1
	return speed<<MSCR_SPEED | hold<<MSCR_HOLD
}

func (n *NIC) rcr() uint32 {
	rcr := uint32(n.cfg.MaxFrame+4)<<RCR_MAX_FL | RCR_MII_MODE
	if n.loop {
		// Internal loopback (SetLoopback): an MII loopback, so no RMII,
		// RGMII, 10T or DRT (IMX6ULLRM 22.5.10).
		return rcr | RCR_LOOP
	}
	switch n.cfg.Interface {
	case RMII:
		rcr |= RCR_RMII_MODE
	case RGMII:
		rcr |= RCR_RGMII_EN
	}
	// 10 Mb/s on every interface, RGMII included (Linux fec_restart).
	if n.link.Speed == 10 {
		rcr |= RCR_RMII_10T
	}
	if !n.link.FullDuplex {
		rcr |= RCR_DRT
	}
	return rcr
}

// Close stops the MAC, aborts frames in flight and frees all DMA memory.
// Packets still held by the caller stay valid until released.
func (n *NIC) Close() error {
	n.ctl.Lock()
	defer n.unlockCtl()
	if n.closed {
		return ErrClosed
	}
	n.closed = true
	n.regs.Write32(ENETx_EIMR, 0)
	n.regs.Write32(ENETx_ECR, 0)
	n.tx.mu.Lock()
	n.tx.reset(n)
	done := n.tx.takeDone()
	err := n.tx.free(n)
	n.tx.mu.Unlock()
	n.deferDone(done)
	n.rx.mu.Lock()
	err = errors.Join(err, n.rx.free(n))
	n.rx.mu.Unlock()
	return err
}

// SetMulticast programs the group hash filter for addrs (p906, 22.5.21
// ENETx_GAUR/GALR): the top 6 bits of the little-endian CRC-32 of each
// address select one of 64 bits.
func (n *NIC) SetMulticast(addrs [][6]byte) {
	var h [2]uint32
	for _, a := range addrs {
		i := HashIndex(a)
		h[1-i/32] |= 1 << (i % 32)
	}
	n.ctl.Lock()
	defer n.ctl.Unlock()
	n.mcast = h
	n.regs.Write32(ENETx_GAUR, h[0])
	n.regs.Write32(ENETx_GALR, h[1])
}

// SetAllMulticast accepts every multicast frame.
func (n *NIC) SetAllMulticast() {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	n.mcast = [2]uint32{^uint32(0), ^uint32(0)}
	n.regs.Write32(ENETx_GAUR, n.mcast[0])
	n.regs.Write32(ENETx_GALR, n.mcast[1])
}

// HashIndex returns the hash table bit (0..63) the ENET uses for address a:
// bits 31:26 of the CRC-32 (reflected, initial value all ones, no final
// inversion) of the address. Bits 32..63 live in the upper register.
func HashIndex(a [6]byte) int {
	crc := ^crc32.ChecksumIEEE(a[:])
	return int(crc >> 26)
}

// Events are decoded interrupt events.
type Events uint32

// Interrupt services the ENET interrupt: it acknowledges the enabled events,
// reclaims completed TX descriptors, wakes RX waiters and restarts the MAC
// after a bus error. The platform calls it from its interrupt handler.
func (n *NIC) Interrupt() (Events, error) {
	ev := n.regs.Read32(ENETx_EIR) & n.regs.Read32(ENETx_EIMR)
	return n.service(ev)
}

// Poll does the work of Interrupt without relying on the interrupt mask:
// for polled operation.
func (n *NIC) Poll() (Events, error) {
	ev := n.regs.Read32(ENETx_EIR) &^ EIR_MII
	return n.service(ev)
}

func (n *NIC) service(ev uint32) (Events, error) {
	if ev != 0 {
		n.regs.Write32(ENETx_EIR, ev) // write 1 to clear exactly these
	}
	if ev&EIR_EBERR != 0 {
		n.ctl.Lock()
		n.ev.busErrors++
		err := n.restartLocked()
		n.unlockCtl()
		return Events(ev), errors.Join(ErrBusError, err)
	}
	n.Reclaim()
	// Signal RX on every pass, even one that found no event: an RXF raised
	// between reading EIR and acknowledging it in the previous pass was
	// acknowledged with it, and its interrupt arrives here with EIR clear.
	// Skipping the signal would leave that frame in the ring until another
	// frame arrives (a lost wakeup that cost TCP a retransmission timeout).
	select {
	case n.rxReady <- struct{}{}:
	default:
	}
	return Events(ev), nil
}

// RxReady is signalled (without blocking; one token) when frames may be
// waiting: after an RX interrupt, or on every Poll.
func (n *NIC) RxReady() <-chan struct{} { return n.rxReady }

// txDone is one completion to report.
type txDone struct {
	cookie any
	err    error
}

// complete delivers completions taken with takeDone, without locks held,
// and recycles their buffer.
func (n *NIC) complete(done *[]txDone) {
	if done == nil {
		return
	}
	if n.cfg.OnTxDone != nil {
		for _, d := range *done {
			n.cfg.OnTxDone(d.cookie, d.err)
		}
	}
	clear(*done) // drop cookie references
	*done = (*done)[:0]
	n.tx.pool.Put(done)
}
