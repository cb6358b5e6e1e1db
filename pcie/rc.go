package pcie

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/internal/mmio"
)

// Errors. Wrapped errors carry the context; test with errors.Is.
var (
	ErrConfig      = errors.New("pcie: bad configuration")
	ErrLinkDown    = errors.New("pcie: link did not come up")
	ErrSpeedChange = errors.New("pcie: Gen2 speed change did not complete")
	ErrPLLLock     = errors.New("pcie: PHY PLL did not lock")
	ErrPHY         = errors.New("pcie: PHY register access failed")
	ErrNoDevice    = errors.New("pcie: no device")
	ErrDeviceGone  = errors.New("pcie: device no longer responds (reads all-ones)")
	ErrBadBAR      = errors.New("pcie: malformed BAR")
	ErrNoSpace     = errors.New("pcie: BAR does not fit the memory window")
	ErrWindowBusy  = errors.New("pcie: memory window is mapped elsewhere")
	ErrBadCap      = errors.New("pcie: malformed capability list")
	ErrNoCap       = errors.New("pcie: capability not present")
	ErrRange       = errors.New("pcie: out of range")
	ErrATU         = errors.New("pcie: iATU region did not take effect")
)

// LinkError says how far link training got.
type LinkError struct {
	SoC    string
	Stage  string // "gen1", "speed change", "gen2"
	LTSSM  uint32 // PL_DEBUG0 bits 5:0
	Debug1 uint32 // PL_DEBUG1
	Waited time.Duration
	Err    error // ErrLinkDown or ErrSpeedChange
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("pcie: %s link %s: %v after %v (LTSSM %#x, PL_DEBUG1 %#08x)",
		e.SoC, e.Stage, e.Err, e.Waited, e.LTSSM, e.Debug1)
}

// Unwrap returns ErrLinkDown or ErrSpeedChange.
func (e *LinkError) Unwrap() error { return e.Err }

// Config is what a board hands the root complex driver. Every register
// block is an mmio.Regs, so the driver runs on TamaGo (mmio.Block at the
// SoC's addresses) and on the host (package pcietest).
type Config struct {
	SoC SoC
	DBI mmio.Regs // the core, at SoC.DBIBase
	GPR mmio.Regs // IOMUXC GPR block
	SRC mmio.Regs // i.MX7D System Reset Controller (nil elsewhere)
	PHY mmio.Regs // i.MX7D PCIe PHY block (nil elsewhere)
	Cfg mmio.Regs // CPU view of the configuration window (SoC.ConfigBase)
	Mem mmio.Regs // CPU view of the memory window (SoC.MemBase)

	// Nanotime and Delay give the driver time; every wait is bounded by
	// them. The host model passes a simulated clock.
	Nanotime func() int64
	Delay    func(time.Duration)

	// Clocks, when set, turns on what the glue does not own: CCM gates,
	// the PCIe/ENET PLL and the PHY reference clock (board and SoC
	// clock tree; docs connectx-pcie.md §6.2 step 3).
	Clocks func() error
	// PERST drives the slot's PERST# (a board GPIO); nil if the board
	// has none. assert=true holds the endpoint in reset.
	PERST func(assert bool)

	// ProbeFunctions lets Enumerate probe functions 1-7 of a
	// multi-function device on an SoC where a read of a missing function
	// aborts (SoC.AbortsOnUR): only with an abort fixup installed, or
	// when the board knows every function exists.
	ProbeFunctions bool

	// ProbeDevices, on an SoC where a read of a missing device aborts
	// (SoC.AbortsOnUR), lists the device numbers to probe on the bus
	// below bridge when that bus is not a link: a switch's internal bus
	// (below its upstream port), whose downstream ports may sit at any
	// device numbers and need not include 0, or a conventional PCI bus.
	// The board knows the switch it carries (bridge.Vendor, DeviceID)
	// and returns where its downstream ports are; with an abort fixup
	// installed (as Linux's on the i.MX6) it may return 0-31. When nil,
	// or for an empty list, that bus is not scanned and bridge records a
	// Problem. Other SoCs scan all 32 device numbers and ignore it.
	ProbeDevices func(bridge *Device) []int

	// PHYRefClock is the i.MX6 PHY's reference clock in Hz: 125 MHz (the
	// PHY's default, also when 0), 100 MHz or 200 MHz, for which the
	// MPLL is reprogrammed. Ignored on the i.MX7D.
	PHYRefClock int

	// MaxGen is the fastest speed to try: 1 or 2 (default 2).
	MaxGen int
	// LinkTimeout bounds each wait for the link (default 900 ms).
	LinkTimeout time.Duration
	// LinkCheckInterval is how old the last look at the core's link
	// state may be before a BAR access through a Window looks again
	// (default 10 ms; see Window). Configuration accesses look every time.
	LinkCheckInterval time.Duration
}

// RC is one DesignWare root complex. It is not safe for concurrent use;
// callers serialise (configuration is done at start-up).
type RC struct {
	soc       SoC
	dbi       mmio.Regs
	gpr       mmio.Regs
	src       mmio.Regs
	phy       mmio.Regs
	cfg       mmio.Regs
	mem       mmio.Regs
	now       func() int64
	delay     func(time.Duration)
	clocks    func() error
	perst     func(bool)
	maxGen    int
	timeout   time.Duration
	probeFn   bool
	probeDevs func(*Device) []int
	refClock  int

	linkUp   bool
	speed    int // current link speed (1 = 2.5 GT/s, 2 = 5 GT/s)
	width    int
	expCap   int // the root port's PCI Express capability in DBI
	cfgValid bool
	cfgTgt   uint32 // current configuration viewport target
	cfgType  uint32

	memTarget uint64 // bus address the memory viewport maps the CPU window to
	memUsers  int    // windows currently mapped

	devices []*Device
	nextBus int

	msiAddr uint64
	stats   Stats

	// lost is set when an access found the link down after Start had
	// brought it up; accesses while lost touch nothing on the bus.
	// Atomic: drivers reach their Windows from their own goroutines.
	lost       atomic.Bool
	linkLost   atomic.Int64
	downAccess atomic.Int64
	retraining atomic.Int64
	checks     atomic.Int64
	lastCheck  atomic.Int64 // rc.now() of the last check that found the link up
	checkEvery time.Duration
}

// Stats counts what went wrong without failing an operation.
type Stats struct {
	ConfigAllOnes  int // configuration reads that returned all-ones
	WindowOutRange int // accesses through a Window beyond its size
	BadBARs        int // BARs refused during enumeration
	BadCaps        int // malformed capability lists
	ATUTimeouts    int // iATU regions whose enable never read back (ErrATU)
	// LinkLost counts the times an access found the link down after
	// Start had brought it up; LinkDownAccess the accesses (BAR through a
	// Window, configuration) refused since, which read all-ones.
	LinkLost, LinkDownAccess int
	// LinkChecks counts the reads of the core's link state (PL DEBUG1)
	// made to guard accesses.
	LinkChecks int
	// Retraining counts the link checks that found the link still in
	// Recovery after waiting recoveryWait: a read or configuration access
	// was refused then (all-ones), a BAR write went out (the core holds
	// it until L0); nothing was latched.
	Retraining int
}

// New checks cfg and returns a root complex; nothing is touched yet.
func New(cfg Config) (*RC, error) {
	s := cfg.SoC
	switch {
	case s.Glue < GlueIMX6Q || s.Glue > GlueIMX7D:
		return nil, fmt.Errorf("%w: unknown SoC glue %v", ErrConfig, s.Glue)
	case cfg.DBI == nil || cfg.GPR == nil || cfg.Cfg == nil || cfg.Mem == nil:
		return nil, fmt.Errorf("%w: DBI, GPR, Cfg and Mem are required", ErrConfig)
	case s.Glue == GlueIMX7D && (cfg.SRC == nil || cfg.PHY == nil):
		return nil, fmt.Errorf("%w: the i.MX7D needs SRC and PHY", ErrConfig)
	case cfg.Nanotime == nil || cfg.Delay == nil:
		return nil, fmt.Errorf("%w: Nanotime and Delay are required", ErrConfig)
	case s.Viewports < 2:
		return nil, fmt.Errorf("%w: %d outbound viewports, need 2", ErrConfig, s.Viewports)
	case s.ConfigSize < 4096 || s.MemSize == 0 || s.BusMemSize < s.MemSize:
		return nil, fmt.Errorf("%w: windows too small", ErrConfig)
	case s.BusMemBase+s.BusMemSize > 1<<32 || s.MemBase+s.MemSize > 1<<32 || s.ConfigBase+s.ConfigSize > 1<<32:
		// QEMU (hw/pci-host/designware.c) ORs the upper target,
		// unshifted, into the lower one, and every i.MX window lies
		// below 4 GiB: keep the upper halves zero.
		return nil, fmt.Errorf("%w: windows must lie below 4 GiB", ErrConfig)
	}
	rc := &RC{soc: s, dbi: cfg.DBI, gpr: cfg.GPR, src: cfg.SRC, phy: cfg.PHY, cfg: cfg.Cfg, mem: cfg.Mem,
		now: cfg.Nanotime, delay: cfg.Delay, clocks: cfg.Clocks, perst: cfg.PERST,
		maxGen: cfg.MaxGen, timeout: cfg.LinkTimeout, probeFn: cfg.ProbeFunctions, probeDevs: cfg.ProbeDevices, refClock: cfg.PHYRefClock}
	if rc.maxGen == 0 {
		rc.maxGen = 2
	}
	if rc.maxGen < 1 || rc.maxGen > 2 {
		return nil, fmt.Errorf("%w: MaxGen %d (1 or 2)", ErrConfig, cfg.MaxGen)
	}
	if rc.timeout == 0 {
		rc.timeout = defaultLinkTO
	}
	rc.checkEvery = cfg.LinkCheckInterval
	if rc.checkEvery == 0 {
		rc.checkEvery = defaultLinkCheck
	}
	if rc.checkEvery < 0 {
		return nil, fmt.Errorf("%w: LinkCheckInterval %v", ErrConfig, cfg.LinkCheckInterval)
	}
	switch cfg.PHYRefClock {
	case 0, 100_000_000, 125_000_000, 200_000_000:
	default:
		return nil, fmt.Errorf("%w: PHY reference clock %d Hz (100, 125 or 200 MHz)", ErrConfig, cfg.PHYRefClock)
	}
	return rc, nil
}

// SoC returns the integration the root complex was built for.
func (rc *RC) SoC() SoC { return rc.soc }

// Stats returns the counters.
func (rc *RC) Stats() Stats {
	st := rc.stats
	st.LinkLost, st.LinkDownAccess = int(rc.linkLost.Load()), int(rc.downAccess.Load())
	st.Retraining, st.LinkChecks = int(rc.retraining.Load()), int(rc.checks.Load())
	return st
}

// LinkUp reports whether Start brought the link up and no access has
// found it down since.
func (rc *RC) LinkUp() bool { return rc.linkUp && !rc.lost.Load() }

// linkAlive reports whether a configuration access may go out on the
// link: Start brought it up, and the core reports it up now (PL DEBUG1,
// in the core's own DBI space, reachable whatever the link does). A link
// found down is recorded once (LinkLost) and stays lost until Start;
// every access refused meanwhile is counted. On the i.MX6 a TLP sent with
// the link down ends in an external abort, which Linux fixes up in
// imx6q_pcie_abort_handler (a read made to return all ones) and which
// TamaGo's exception vectors cannot return from. Configuration accesses
// are rare and check every time; BAR accesses through a Window, the data
// path, check as pathOpen says.
func (rc *RC) linkAlive() bool {
	if rc.linkNow() {
		return true
	}
	rc.downAccess.Add(1)
	return false
}

// pathOpen is the link check of a BAR access through a Window, kept off
// the data path: no register is read unless the last check is older than
// the check interval (Config.LinkCheckInterval), so a driver's register
// accesses cost one PL DEBUG1 read per interval instead of one each. A
// link lost since the last check is found by the next check, by a read
// that returns all-ones (Window.Read32 checks then) or by the driver's
// own Window.LinkUp on an error; an access in between reaches the dead
// link (an abort on the i.MX6): that is the price of not reading PL
// DEBUG1 before every access, and the interval bounds it. A write (posted)
// goes out on a link still up in Recovery after recoveryWait, which the
// core holds until L0, as Linux, which gates no BAR access, would send
// it; a read, which would wait for its completion, is refused then
// (counted in Stats.Retraining, not as an access to a down link).
func (rc *RC) pathOpen(write bool) bool {
	if !rc.linkUp || rc.lost.Load() {
		rc.downAccess.Add(1)
		return false
	}
	if now := rc.now(); now-rc.lastCheck.Load() < int64(rc.checkEvery) {
		return true
	}
	switch rc.linkState() {
	case linkL0:
		return true
	case linkRecovery:
		return write
	}
	rc.downAccess.Add(1)
	return false
}

// What a link check found.
const (
	linkDown     = iota // LINK_UP clear, or lost since Start
	linkL0              // up and out of training
	linkRecovery        // up, still in training after recoveryWait
)

// linkNow is linkAlive without counting an access: whether the link is
// up and out of Recovery (linkState).
func (rc *RC) linkNow() bool { return rc.linkState() == linkL0 }

// linkState reads the link. PL DEBUG1 tells three states apart (Linux
// pci-imx6.c imx6_pcie_link_up, v3.x-v4.x): link down (LINK_UP clear: the
// LTSSM left the link-up states, the endpoint went through a reset, PCI
// Express Base 3.0 2.9.1), recorded as lost until Start; up and in
// training, which is Recovery (a replay timeout, receiver errors, an
// L0s/L1 exit, PCI Express Base 3.0 4.2.6.4) and passes, so it is waited
// out for at most recoveryWait and never latched (a Recovery still
// running then is counted in Stats.Retraining and the next check looks
// again); and up.
func (rc *RC) linkState() int {
	if !rc.linkUp || rc.lost.Load() {
		return linkDown
	}
	rc.checks.Add(1)
	v := rc.dbi.Read32(plDebug1)
	if v&debug1LinkUp != 0 && v&debug1InTraining != 0 {
		deadline := rc.now() + int64(recoveryWait)
		for v&debug1LinkUp != 0 && v&debug1InTraining != 0 && rc.now() < deadline {
			rc.delay(recoveryPoll)
			v = rc.dbi.Read32(plDebug1)
		}
		if v&debug1LinkUp != 0 && v&debug1InTraining != 0 {
			rc.retraining.Add(1)
			return linkRecovery
		}
	}
	if v&debug1LinkUp != 0 {
		rc.lastCheck.Store(rc.now())
		return linkL0
	}
	if !rc.lost.Swap(true) {
		rc.linkLost.Add(1)
	}
	return linkDown
}

// Link returns the negotiated speed (1 = 2.5 GT/s, 2 = 5 GT/s) and width.
func (rc *RC) Link() (gen, width int) { return rc.speed, rc.width }

func update(r mmio.Regs, off, mask, val uint32) {
	r.Write32(off, r.Read32(off)&^mask|val&mask)
}

// Start brings the core out of reset, trains the link at Gen1 and then,
// if allowed, asks for Gen2. It programs the root port (bus numbers,
// class, BARs off) whether or not the link comes up; a link that never
// trains returns a *LinkError wrapping ErrLinkDown after LinkTimeout.
func (rc *RC) Start() error {
	rc.linkUp = false
	rc.lost.Store(false)
	rc.cfgValid = false
	rc.memTarget, rc.memUsers = 0, 0
	rc.forceDetect()
	rc.assertReset()
	rc.initPHY()
	if rc.clocks != nil {
		if err := rc.clocks(); err != nil {
			return fmt.Errorf("pcie: %s clocks: %w", rc.soc.Name, err)
		}
	}
	rc.enableRefClock()
	if err := rc.deassertReset(); err != nil {
		return err
	}
	if rc.soc.Glue != GlueIMX7D {
		if err := rc.setupMPLL(); err != nil {
			return err
		}
	}
	rc.setupRootPort()
	err := rc.train()
	if err != nil && rc.soc.Glue != GlueIMX7D {
		rc.resetPHYRx()
	}
	return err
}

// forceDetect takes a link a boot loader left up back to Detect before
// the resets, as U-Boot and Linux do on the i.MX6Q (docs §6.2 step 1).
func (rc *RC) forceDetect() {
	if rc.soc.Glue != GlueIMX6Q {
		return
	}
	g1, g12 := rc.gpr.Read32(gpr1), rc.gpr.Read32(gpr12)
	if g1&gpr1PCIeRefClkEn == 0 || g12&gpr12PCIeCtl2 == 0 {
		return
	}
	v := rc.dbi.Read32(plPFLR)
	rc.dbi.Write32(plPFLR, v&^pflrLinkNum|pflrForceLink)
	update(rc.gpr, gpr12, gpr12PCIeCtl2, 0)
}

func (rc *RC) assertReset() {
	switch rc.soc.Glue {
	case GlueIMX6Q:
		update(rc.gpr, gpr1, gpr1PCIeTestPD|gpr1PCIeRefClkEn, gpr1PCIeTestPD)
	case GlueIMX6SX:
		update(rc.gpr, gpr12, gpr12SXTestPowerDn, gpr12SXTestPowerDn)
		update(rc.gpr, gpr5, gpr5SXBtnRst, gpr5SXBtnRst)
	case GlueIMX7D:
		// PHY held in reset, LTSSM stopped (APPS_EN is active high).
		update(rc.src, srcPCIePHYRCR, rcrPHYGRst|rcrPHYBtn|rcrAppsEn, rcrPHYGRst|rcrPHYBtn)
	}
	if rc.perst != nil {
		rc.perst(true)
	}
}

func (rc *RC) initPHY() {
	switch rc.soc.Glue {
	case GlueIMX7D:
		update(rc.gpr, gpr12, gpr12MX7RefClkSel, 0) // internal PLL
	case GlueIMX6SX:
		update(rc.gpr, gpr12, gpr12SXRxEq, gpr12SXRxEq2)
		fallthrough
	case GlueIMX6Q:
		update(rc.gpr, gpr12, gpr12PCIeCtl2|gpr12LOSLevel, gpr12LOSLevel9)
		rc.gpr.Write32(gpr8, gpr8Defaults)
	}
	update(rc.gpr, gpr12, gpr12DeviceType, gpr12DeviceTypeRC)
}

func (rc *RC) enableRefClock() {
	switch rc.soc.Glue {
	case GlueIMX6Q:
		update(rc.gpr, gpr1, gpr1PCIeTestPD, 0)
		rc.delay(testPDSettle)
		update(rc.gpr, gpr1, gpr1PCIeRefClkEn, gpr1PCIeRefClkEn)
	case GlueIMX6SX:
		update(rc.gpr, gpr12, gpr12SXTestPowerDn, 0)
	}
	rc.delay(refClkSettle)
}

func (rc *RC) deassertReset() error {
	switch rc.soc.Glue {
	case GlueIMX7D:
		rc.delay(phyResetHold)
		update(rc.src, srcPCIePHYRCR, rcrPHYGRst|rcrPHYBtn, 0)
		// ERR010728: the PHY PLL's VCO may fail to oscillate when cold.
		rc.phy.Write32(phyCMNReg4, phyReg4DCCFBEn)
		rc.phy.Write32(phyCMNReg24, phyReg24RxEq)
		rc.phy.Write32(phyCMNReg26, phyReg26AttMode)
		if !rc.waitFor(pllLockWait, func() bool { return rc.gpr.Read32(gpr22)&gpr22MX7PLLLocked != 0 }) {
			return fmt.Errorf("pcie: %s: %w (GPR22 %#08x)", rc.soc.Name, ErrPLLLock, rc.gpr.Read32(gpr22))
		}
	case GlueIMX6SX:
		update(rc.gpr, gpr5, gpr5SXBtnRst, 0)
	}
	if rc.perst != nil {
		rc.delay(perstAssert)
		rc.perst(false)
		rc.delay(perstRelease)
	}
	return nil
}

// setupRootPort programs the root port's own header through the DBI
// (docs §6.4; Linux dw_pcie_setup_rc): BARs off, bus numbers 0/1/0xFF,
// class PCI bridge.
func (rc *RC) setupRootPort() {
	rc.dbi.Write32(cfgBAR0, 0)
	rc.dbi.Write32(cfgBAR0+4, 0)
	rc.dbi.Write32(cfgBusNumbers, rc.dbi.Read32(cfgBusNumbers)&0xFF00_0000|0x00FF_0100)
	rc.roWrite(true)
	rc.dbi.Write32(cfgClassRev, 0x0604_0000|rc.dbi.Read32(cfgClassRev)&0xFF)
	rc.roWrite(false)
	rc.expCap = rc.findDBICap(CapPCIe)
}

func (rc *RC) roWrite(on bool) {
	v := uint32(0)
	if on {
		v = miscDBIROWrEn
	}
	update(rc.dbi, plMiscControl1, miscDBIROWrEn, v)
}

// findDBICap walks the root port's capability list in the DBI.
func (rc *RC) findDBICap(id byte) int {
	caps, _ := walkCaps(func(off int) uint32 { return rc.dbi.Read32(uint32(off)) }, int(rc.soc.RCConfigSize))
	for _, c := range caps {
		if c.ID == id {
			return c.Offset
		}
	}
	return 0
}

func (rc *RC) ltssm(on bool) {
	switch rc.soc.Glue {
	case GlueIMX7D:
		v := uint32(0)
		if on {
			v = rcrAppsEn
		}
		update(rc.src, srcPCIePHYRCR, rcrAppsEn, v)
	default:
		v := uint32(0)
		if on {
			v = gpr12PCIeCtl2
		}
		update(rc.gpr, gpr12, gpr12PCIeCtl2, v)
	}
}

// setMaxSpeed writes the Supported Link Speeds field of the root port's
// Link Capabilities (read-only unless DBI_RO_WR_EN is set).
func (rc *RC) setMaxSpeed(gen uint32) {
	if rc.expCap == 0 {
		return
	}
	off := uint32(rc.expCap + expLnkCap)
	rc.roWrite(true)
	update(rc.dbi, off, lnkCapSLS, gen)
	rc.roWrite(false)
}

func (rc *RC) train() error {
	rc.setMaxSpeed(1) // Gen1 first: some switches are not found otherwise (Linux)
	rc.ltssm(true)
	if err := rc.waitLink("gen1"); err != nil {
		return err
	}
	if rc.maxGen >= 2 {
		rc.setMaxSpeed(2)
		update(rc.dbi, plG2CR, g2crSpeedChange, g2crSpeedChange)
		if rc.soc.SpeedChangeClears {
			t0 := rc.now()
			if !rc.waitFor(speedWait, func() bool { return rc.dbi.Read32(plG2CR)&g2crSpeedChange == 0 }) {
				return rc.linkErr("speed change", ErrSpeedChange, t0)
			}
		}
		if err := rc.waitLink("gen2"); err != nil {
			return err
		}
	}
	rc.linkUp = true
	rc.lastCheck.Store(rc.now())
	rc.speed, rc.width = 1, 1
	if rc.expCap != 0 {
		sta := rc.dbi.Read32(uint32(rc.expCap+expLnkSta)&^3) >> 16
		if s := int(sta & 0xF); s > 0 {
			rc.speed = s
		}
		if w := int(sta>>4) & 0x3F; w > 0 {
			rc.width = w
		}
	}
	return nil
}

func (rc *RC) linkUpNow() bool {
	v := rc.dbi.Read32(plDebug1)
	return v&debug1LinkUp != 0 && v&debug1InTraining == 0
}

func (rc *RC) waitLink(stage string) error {
	t0 := rc.now()
	if rc.waitFor(rc.timeout, rc.linkUpNow) {
		return nil
	}
	return rc.linkErr(stage, ErrLinkDown, t0)
}

func (rc *RC) linkErr(stage string, err error, t0 int64) error {
	return &LinkError{SoC: rc.soc.Name, Stage: stage, LTSSM: rc.dbi.Read32(plDebug0) & ltssmMask,
		Debug1: rc.dbi.Read32(plDebug1), Waited: time.Duration(rc.now() - t0), Err: err}
}

// waitFor polls cond every millisecond until it holds or d has passed.
func (rc *RC) waitFor(d time.Duration, cond func() bool) bool {
	deadline := rc.now() + int64(d)
	for {
		if cond() {
			return true
		}
		if rc.now() >= deadline {
			return false
		}
		rc.delay(pollInterval)
	}
}

// Stop stops the LTSSM and holds the PHY/core in reset; the link drops.
func (rc *RC) Stop() {
	rc.ltssm(false)
	rc.assertReset()
	rc.linkUp = false
	rc.cfgValid = false
}
