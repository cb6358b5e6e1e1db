// Package pcietest is a host model of the DesignWare PCIe root complex as
// the i.MX6/7 integrate it: the DBI (root port header, port logic, MSI
// receiver, outbound iATU viewports), the SoC glue (IOMUXC GPR, i.MX7D
// SRC and PHY) with a link that trains only when the glue is right, and
// configuration and memory routing through bridges to pluggable functions
// whose BARs are Go handlers and whose DMA goes through the dma/dmatest
// model.
//
// It enforces what the silicon enforces and reports, as violations, what
// the silicon would turn into an abort or silent loss: an access outside
// every enabled viewport, a configuration read of a missing function on
// an SoC where that aborts (i.MX6), a Type 0/1 mismatch, TLPs with the
// link down, memory requests the root port's window or command register
// does not forward, DMA without bus mastering, device writes into the
// root port's window (peer-to-peer, never reaching DDR), DBI accesses
// beyond what the SoC maps, and MSI status writes of bits that are not
// set (QEMU's designware.c XORs the status with what is written).
//
// Time is simulated: Nanotime advances only through Delay, so link
// timeouts are tested without waiting.
package pcietest

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// Options configures a Host.
type Options struct {
	SoC pcie.SoC
	// Mem is where device DMA lands (nil: DMA fails).
	Mem *dmatest.Memory
	// NeverTrains keeps the link down whatever the driver does.
	NeverTrains bool
	// TrainPolls is how many PL_DEBUG1 reads training takes (default 3).
	TrainPolls int
	// PartnerGen is the fastest speed the device on the link supports
	// (default 2).
	PartnerGen int
	// SpeedChangeStuck: PL_G2CR's speed change bit never clears.
	SpeedChangeStuck bool
	// PLLNeverLocks: the i.MX7D PHY PLL never reports lock.
	PLLNeverLocks bool
	// PHYStuck: the i.MX6 PHY never acknowledges a PHY_CTRL strobe.
	PHYStuck bool
	// RegionAlign is the iATU's minimum region size (default 64 KiB):
	// the low bits of a region's base and target must be zero and the
	// limit's low bits are hardwired to ones. Linux reads it back
	// (pcie-designware.c dw_pcie_iatu_detect: LIMIT written 0 reads
	// region_align-1) and an i.MX6Q reports "iATU: unroll F, 4 ob, 4 ib,
	// align 64K, limit 4G"; dw_pcie_prog_outbound_atu refuses unaligned
	// cpu_addr or pci_addr with -EINVAL. QEMU 7.2 reports "align 0K".
	RegionAlign uint32
	// ATUEnableLag is how many reads of PL_IATURC2 after a write to it
	// read ENABLE clear, the region not yet in effect. Whatever it is, a write to
	// PL_IATURC2 takes effect only once PL_IATURC2 of that region has
	// been read back showing it: until then CPU accesses are translated by
	// the region as it was (Linux pcie-designware.c
	// __dw_pcie_prog_outbound_atu: "Make sure ATU enable takes effect
	// before any subsequent config and I/O accesses", polling CR2's
	// ENABLE up to LINK_WAIT_MAX_IATU_RETRIES = 5 times, LINK_WAIT_IATU
	// = 9 ms apart; the DBI write is posted and the windows sit on
	// another AXI port, so an access through a window can overtake it).
	ATUEnableLag int
}

// PHYWrite is one write to an i.MX6 PHY register through PHY_CTRL.
type PHYWrite struct {
	Addr, Val uint16
}

type viewport struct {
	cr1, cr2, lba, uba, la, lta, uta uint32
}

// Host is the model. It is safe for concurrent use.
type Host struct {
	mu   sync.Mutex
	opts Options
	soc  pcie.SoC

	root *Function // the root port's header (DBI 0x000-0xFFF)
	pl   map[uint32]uint32
	gpr  [32]uint32
	src  [32]uint32
	phy  map[uint32]uint32

	vpIndex uint32
	vp      []viewport
	active  []viewport // what translates CPU accesses
	pending []*viewport
	lag     []int

	msiAddr                    uint64
	msiEnable, msiMask, msiSta uint32

	linkUp    bool
	recovery  int64 // simulated time until which the link is in Recovery (Retrain)
	polls     int
	gen       int
	firstGen  int
	g2Pending bool

	nowNs    int64
	viol     []string
	tlps     int
	dbiReads int

	phyCtrl          uint32
	phyAddr, phyData uint16
	phyOut           uint16
	phyRegs          map[uint16]uint16
	phyLog           []PHYWrite
}

// Config returns the root complex driver's configuration wired to this
// model: its SoC, register blocks (DBI, GPR, SRC, PHY), windows, clock and
// delay.
func (h *Host) Config() pcie.Config {
	return pcie.Config{SoC: h.soc, DBI: h.DBI(), GPR: h.GPR(), SRC: h.SRC(), PHY: h.PHY(),
		Cfg: h.ConfigWindow(), Mem: h.MemWindow(), Nanotime: h.Nanotime, Delay: h.Delay}
}

// Up brings the pcie driver up on the model as a device driver's test
// needs it: pcie.New with Config, Start (link training), Enumerate.
func (h *Host) Up() (*pcie.RC, []*pcie.Device, error) {
	rc, err := pcie.New(h.Config())
	if err != nil {
		return nil, nil, fmt.Errorf("pcietest: %w", err)
	}
	if err := rc.Start(); err != nil {
		return nil, nil, fmt.Errorf("pcietest: start: %w", err)
	}
	devs, err := rc.Enumerate()
	if err != nil {
		return nil, nil, fmt.Errorf("pcietest: enumerate: %w", err)
	}
	return rc, devs, nil
}

// New returns a model of opts.SoC's root complex with nothing attached.
func New(opts Options) *Host {
	if opts.TrainPolls == 0 {
		opts.TrainPolls = 3
	}
	if opts.PartnerGen == 0 {
		opts.PartnerGen = 2
	}
	if opts.RegionAlign == 0 {
		opts.RegionAlign = 64 << 10
	}
	h := &Host{opts: opts, soc: opts.SoC, pl: map[uint32]uint32{}, phy: map[uint32]uint32{}, phyRegs: map[uint16]uint16{},
		vp: make([]viewport, opts.SoC.Viewports), active: make([]viewport, opts.SoC.Viewports),
		pending: make([]*viewport, opts.SoC.Viewports), lag: make([]int, opts.SoC.Viewports)}
	// The root port as QEMU 7.2 presents it (16c3:abcd, MSI at 0x50,
	// PCI Express root port at 0x70), Gen2 x1 capable.
	r := NewBridge(0x16C3, 0xABCD)
	r.h = h
	r.AddCapability(0x01, make([]byte, 6)) // power management at 0x40
	r.next = 0x50
	r.AddMSI(true)
	r.next = 0x70
	exp := r.AddPCIe(4, 2, 1)
	r.put16(exp+0x12, 0) // no link yet
	r.writable(0x10, 8, 0xFFFF_FFFF)
	r.romask[0x09], r.romask[0x0A], r.romask[0x0B] = 0xFF, 0xFF, 0xFF // class code
	r.romask[exp+0x0C] = 0xFF                                         // link capabilities
	r.romask[exp+0x0D] = 0xFF
	h.root = r
	return h
}

// Attach puts f at device 0, function fn, of the bus below the root port
// (a link holds device 0 only).
func (h *Host) Attach(fn int, f *Function) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.root.Attach(0, fn, f)
}

// Root returns the root port's function (its header as the DBI shows it).
func (h *Host) Root() *Function { return h.root }

// Take returns and forgets the violations recorded so far.
func (h *Host) Take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.viol
	h.viol = nil
	return v
}

func (h *Host) violate(format string, a ...any) {
	_, file, line, _ := runtime.Caller(3)
	h.viol = append(h.viol, fmt.Sprintf(format, a...)+fmt.Sprintf(" (at %s:%d)", file, line))
}

// Nanotime is the simulated clock; pass it with Delay to pcie.Config.
func (h *Host) Nanotime() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nowNs
}

// Delay advances the simulated clock.
func (h *Host) Delay(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nowNs += int64(d)
}

// LinkUp reports the model's link state; Gen the current speed and
// FirstGen the speed the link first trained at.
func (h *Host) LinkUp() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.linkUp }

// DropLink takes the link down for good, as a card that loses power or a
// cable pulled would: the LTSSM falls back to Detect and finds no partner
// to train with again (PCI Express Base 3.0, 4.2.6: a link that fails
// goes to Detect), and PL DEBUG1 reports the link down (what the driver's
// link-up wait polls, Linux pcie-designware.c dw_pcie_link_up).
// From then on a TLP the CPU sends is an abort (a violation).
func (h *Host) DropLink() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.linkUp = false
	h.opts.NeverTrains = true
}

// Retrain puts the link through Recovery for d of simulated time, as a
// replay timeout, receiver errors, a speed change or an L0s/L1 exit do
// while the link stays up (PCI Express Base 3.0, 4.2.6.4: Recovery is
// entered from L0 and returns to L0 without leaving the link-up states;
// 4.2.6.4.1: Recovery.RcvrLock gives up after 24 ms). Meanwhile PL DEBUG1
// reads LINK_UP with LINK_IN_TRAINING set (Linux pci-imx6.c
// imx6_pcie_link_up, v3.x-v4.x: "the link is UP, but still in LTSSM
// training ... wait for the training to finish"; U-Boot pcie_imx.c reads
// the same as Recovery) and PL DEBUG0 the LTSSM in Recovery.RcvrLock
// (0x0D). TLPs the CPU sends meanwhile are held by the core and go out
// when the link is back in L0: they are not lost and no violation.
func (h *Host) Retrain(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.linkUp {
		h.recovery = h.nowNs + int64(d)
	}
}

func (h *Host) inRecovery() bool { return h.linkUp && h.nowNs < h.recovery }

// SetATUEnableLag changes Options.ATUEnableLag for the writes to come.
func (h *Host) SetATUEnableLag(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opts.ATUEnableLag = n
}

// Gen returns the current link speed, FirstGen the speed the link first
// trained at.
func (h *Host) Gen() int      { h.mu.Lock(); defer h.mu.Unlock(); return h.gen }
func (h *Host) FirstGen() int { h.mu.Lock(); defer h.mu.Unlock(); return h.firstGen }

// DBIReads counts the reads of the core's registers (DBI) so far.
func (h *Host) DBIReads() int { h.mu.Lock(); defer h.mu.Unlock(); return h.dbiReads }

// TLPs counts configuration and memory requests that left the root port.
func (h *Host) TLPs() int { h.mu.Lock(); defer h.mu.Unlock(); return h.tlps }

// MSILine reports the SoC's MSI interrupt: an enabled, unmasked vector is
// pending.
func (h *Host) MSILine() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.msiSta&^h.msiMask != 0
}

// INTx reports whether INTA..INTD (pin 1-4) is asserted at the root port.
func (h *Host) INTx(pin int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	on := false
	h.each(h.root, func(f *Function) {
		if p, a := f.intxAsserted(); a && p == pin {
			on = true
		}
	})
	return on
}

func (h *Host) each(f *Function, fn func(*Function)) {
	for d := range f.children {
		for _, c := range f.children[d] {
			if c != nil {
				fn(c)
				h.each(c, fn)
			}
		}
	}
}

// --- SoC glue ---------------------------------------------------------

// --- DBI ----------------------------------------------------------------

// Port-logic offsets the model decodes, audited against Linux
// drivers/pci/controller/dwc/pcie-designware.h (PCIE_PORT_DEBUG0 0x728,
// PCIE_PORT_DEBUG1 0x72C with LINK_UP bit 4 and LINK_IN_TRAINING bit 29,
// PCIE_LINK_WIDTH_SPEED_CONTROL 0x80C with PORT_LOGIC_SPEED_CHANGE bit 17,
// PCIE_MSI_ADDR_LO/HI 0x820/0x824, PCIE_MSI_INTR0_ENABLE/MASK/STATUS
// 0x828/0x82C/0x830, PCIE_MISC_CONTROL_1_OFF 0x8BC with DBI_RO_WR_EN bit 0,
// PCIE_ATU_VIEWPORT 0x900 with REGION_INBOUND bit 31, CR1 0x904 (TYPE_MEM
// 0, CFG0 4, CFG1 5), CR2 0x908 with ENABLE bit 31, LOWER/UPPER_BASE
// 0x90C/0x910, LIMIT 0x914, LOWER/UPPER_TARGET 0x918/0x91C, PCIE_ATU_BUS/
// DEV/FUNC at bits 31:24/23:19/18:16) and QEMU hw/pci-host/designware.c
// (DESIGNWARE_PCIE_* of the same values; the viewport takes effect on the
// CR2 write, designware_pcie_update_viewport). PHY_STAT 0x810 and PHY_CTRL
// 0x814 with CAP_ADR/CAP_DAT/WR/RD strobes at bits 16-19 and ACK at
// PHY_STAT bit 16 are pci-imx6.c's PCIE_PHY_STAT/PCIE_PHY_CTRL
// (pcie_phy_wait_ack: ack follows the strobe, drops when it is released).

// DBI returns the core's register block.
func (h *Host) DBI() mmio.Regs { return regs{h, h.dbiRead, h.dbiWrite} }

func (h *Host) dbiCheck(off uint32, what string) bool {
	switch {
	case off&3 != 0:
		h.violate("DBI %s at unaligned %#x", what, off)
	case off >= h.soc.DBISize:
		h.violate("DBI %s at %#x beyond the %#x bytes mapped (data abort)", what, off, h.soc.DBISize)
	case off >= h.soc.RCConfigSize && off < 0x700:
		h.violate("DBI %s at %#x beyond the root port's %#x-byte configuration space (imprecise abort)", what, off, h.soc.RCConfigSize)
	default:
		return true
	}
	return false
}

func (h *Host) dbiRead(off uint32) uint32 {
	h.dbiReads++
	if !h.dbiCheck(off, "read") {
		return 0xFFFF_FFFF
	}
	vp := &h.vp[h.vpIndex%uint32(len(h.vp))]
	switch off {
	case 0x810:
		return h.phyStatus()
	case 0x728:
		if h.inRecovery() {
			return 0x0D
		}
		if h.linkUp {
			return 0x11
		}
		return 0
	case 0x72C:
		ready, on := h.glueReady()
		if !h.linkUp && ready && on && !h.opts.NeverTrains {
			h.polls++
			if h.polls >= h.opts.TrainPolls {
				h.linkUp = true
				g := min(h.rootLnkCapGen(), h.opts.PartnerGen)
				h.setGen(g)
				if h.firstGen == 0 {
					h.firstGen = g
				}
			}
			return 1 << 29 // in training
		}
		if h.inRecovery() {
			return 1<<4 | 1<<29
		}
		if h.linkUp {
			return 1 << 4
		}
		return 0
	case 0x80C:
		v := h.pl[off]
		if h.g2Pending {
			if h.soc.SpeedChangeClears && !h.opts.SpeedChangeStuck {
				h.g2Pending = false
				v &^= 1 << 17
				h.pl[off] = v
			}
		}
		return v
	case 0x820:
		return uint32(h.msiAddr)
	case 0x824:
		return uint32(h.msiAddr >> 32)
	case 0x828:
		return h.msiEnable
	case 0x82C:
		return h.msiMask
	case 0x830:
		return h.msiSta
	case 0x900:
		return h.vpIndex
	case 0x904:
		return vp.cr1
	case 0x908:
		i := h.vpIndex % uint32(len(h.vp))
		if p := h.pending[i]; p != nil {
			if h.lag[i] > 0 {
				// Not in effect yet: ENABLE reads clear, which is
				// what Linux's poll for it waits out.
				h.lag[i]--
				return p.cr2 &^ (1 << 31)
			}
			h.active[i], h.pending[i] = *p, nil
		}
		return vp.cr2
	case 0x90C:
		return vp.lba
	case 0x910:
		return vp.uba
	case 0x914:
		// The limit's low bits are hardwired to ones (Linux
		// dw_pcie_iatu_detect reads region_align-1 after writing 0).
		return vp.la | (h.opts.RegionAlign - 1)
	case 0x918:
		return vp.lta
	case 0x91C:
		return vp.uta
	}
	if off < 0x700 {
		return h.root.readConfig(int(off))
	}
	return h.pl[off]
}

func (h *Host) dbiWrite(off, v uint32) {
	if !h.dbiCheck(off, "write") {
		return
	}
	if off >= 0x904 && off <= 0x91C && h.vpIndex&0x7FFF_FFFF >= uint32(len(h.vp)) {
		h.violate("iATU viewport %#x does not exist (%d outbound regions)", h.vpIndex, len(h.vp))
		return
	}
	vp := &h.vp[h.vpIndex%uint32(len(h.vp))]
	if h.vpIndex&(1<<31) != 0 && off >= 0x904 && off <= 0x91C {
		h.violate("inbound viewport programmed; the model (and the driver) use only outbound")
		return
	}
	switch off {
	case 0x814:
		h.pl[off] = v
		h.phyCtrlWrite(v)
	case 0x80C:
		h.pl[off] = v
		if v&(1<<17) != 0 && h.linkUp {
			// Directed speed change: the link retrains through
			// Recovery at the best speed both ends allow.
			h.setGen(min(h.rootLnkCapGen(), h.opts.PartnerGen))
			h.g2Pending = true
		}
	case 0x820:
		h.msiAddr = h.msiAddr&^0xFFFF_FFFF | uint64(v)
	case 0x824:
		h.msiAddr = h.msiAddr&0xFFFF_FFFF | uint64(v)<<32
	case 0x828:
		h.msiEnable = v
	case 0x82C:
		h.msiMask = v
	case 0x830:
		// Silicon: write 1 to clear (Linux dw_handle_msi_irq writes
		// BIT(pos) it read as set). QEMU 7.2: status ^= val.
		if v&^h.msiSta != 0 {
			h.violate("MSI status write %#x sets bits that are not pending (%#x): QEMU's designware.c XORs status, setting them", v, h.msiSta)
		}
		h.msiSta &^= v
	case 0x900:
		h.vpIndex = v
	case 0x904:
		vp.cr1 = v
	case 0x908:
		vp.cr2 = v
		if v&(1<<31) != 0 {
			h.checkRegion(vp)
		}
		i := h.vpIndex % uint32(len(h.vp))
		p := *vp
		h.pending[i], h.lag[i] = &p, h.opts.ATUEnableLag
	case 0x90C:
		vp.lba = v
	case 0x910:
		vp.uba = v
	case 0x914:
		vp.la = v
	case 0x918:
		vp.lta = v
	case 0x91C:
		// QEMU 7.2 designware.c: viewport->target |= val (unshifted).
		if v != 0 {
			h.violate("iATU upper target %#x: QEMU's designware.c ORs it, unshifted, into the lower target", v)
		}
		vp.uta = v
	default:
		if off < 0x700 {
			h.root.writeConfig(int(off), v, h.pl[0x8BC]&1 != 0)
			return
		}
		h.pl[off] = v
	}
}

// --- CPU windows --------------------------------------------------------
