//go:build tamago && arm

// Package mcimx7d brings up the tamanic drivers on the NXP i.MX 7Dual
// SABRE (MCIMX7SABRE) and QEMU's mcimx7d-sabre machine. TamaGo has no
// i.MX7D support, so this package provides it (runtime.go): the runtime
// hooks, the generic timer, the UART1 console, the GIC; plus ENET1 through
// package fec, the PCIe root complex through package pcie, and the
// tickless idle governor shared with the mx6ullevk board.
//
// Memory: DDR starts at 0x8000_0000. As on the mx6ullevk, the Go runtime
// gets the first 480 MiB and the 96 MiB above it are the DMA region, which
// TamaGo's MMU setup maps strongly ordered (everything outside the
// runtime's RAM); Memory remaps its buffer part cacheable. The SABRE has
// 1 GiB; the rest is unused.
//
// What is only known to work under QEMU 7.2: ENET1 is taken as QEMU
// presents it (no CCM clock roots, GPR1 clock direction, pad muxing or
// RGMII PHY set-up: on silicon a boot loader must have done those), and
// the PCIe PHY, SRC and GPR are unimplemented or stubbed in QEMU, so the
// glue's reset and PLL sequence, and the board's PCIe clocks, power domain
// and 74HC595 slot reset (pcieglue.go), have run only against host models.
package mcimx7d

import (
	// cpuinit, zeroing .bss and .noptrbss, in the linkcpuinit build.
	_ "github.com/tamanic/tamanic/internal/boot"

	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/arm/gic"

	"github.com/tamanic/tamanic/board/internal/phylink"
	"github.com/tamanic/tamanic/board/internal/physmem"
	"github.com/tamanic/tamanic/board/internal/tickless"
	"github.com/tamanic/tamanic/board/pcireport"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// GIC is the interrupt controller.
var GIC = &gic.GIC{Base: GICBase}

var (
	irqs  atomic.Int64 // ENET interrupts serviced
	irqNs atomic.Int64 // time in the ENET handler
	idle  *tickless.Governor
)

// Init installs the shared tickless idle governor. The SoC, console and
// timer are already up (hwinit1).
func Init() {
	idle = tickless.Install(ARM)
}

// Nanotime is the clock the board's counters and gVisor's clock use: the
// runtime's (tickless.Nanotime, integer arithmetic).
func Nanotime() int64 { return tickless.Nanotime(ARM) }

// IdleNanoseconds returns the time spent idle since Init.
func IdleNanoseconds() int64 { return idle.IdleNanoseconds() }

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler.
func Interrupts() (n, ns int64) { return irqs.Load(), irqNs.Load() }

var memory *dma.System

// Memory returns the DMA memory of the board (one instance: ENET1, the
// 82574L and the ConnectX share it), its buffer part normal write-back
// cacheable, as the i.MX6UL boards' (imx6ulboard.CacheableMemory).
//
// TamaGo's MMU setup (arm.CPU.InitMMU) maps only the runtime's RAM as
// normal memory; every other section, the DMA region included, is
// strongly ordered: uncached, each access on its own to the bus (ARM
// Architecture Reference Manual ARMv7-A/R, A3.5), so on silicon every
// byte the endpoint copies or sums out of a receive buffer, and every
// bounce copy and header written into one, would go to DDR a word at a
// time. The first call remaps the buffer part (all but the first MiB) as
// normal memory, write-back cacheable (TEX=000 C=1 B=1,
// arm.MemoryRegion, never executable), one 1 MiB section at a time; the
// descriptor rings, the ConnectX command queue and mailboxes (Coherent,
// the first MiB) stay strongly ordered. The Cortex-A7's L2 is integrated
// (no PL310): maintenance by address to the point of coherency (clean
// before a device reads, invalidate before the CPU reads: dma.ARMv7Cache)
// covers both levels, and i.MX7D PCIe and ENET DMA are not coherent with
// it, so every driver maintains every buffer it hands over (checked
// against the non-coherent host model dmatest in the fec, e1000e and
// connectx tests). QEMU models no cache: there the remap changes nothing
// but the maintenance instructions executed.
func Memory() *dma.System {
	if memory == nil {
		ARM.ConfigureMMU(DMAStart+CoherentSize, DMAStart+DMASize, 0, arm.MemoryRegion|arm.TTE_EXECUTE_NEVER)
		dma.TranslationBarrier() // DSB, ISB after ConfigureMMU's TLBIALL
		memory = dma.NewSystem(dma.SystemConfig{
			Coherent: dma.RegionConfig{Mem: physmem.Region(DMAStart, CoherentSize), Base: DMAStart},
			Cached:   dma.RegionConfig{Mem: physmem.Region(DMAStart+CoherentSize, DMASize-CoherentSize), Base: DMAStart + CoherentSize},
			RAMStart: RAMStart, RAMEnd: RAMStart + GoRAMSize,
			Cache: dma.ARMv7Cache{},
		})
	}
	return memory
}

// ENET1 returns a fec.NIC on ENET1, initialised and interrupt-driven.
// cfg's Regs, Mem, Caps and MAC (when zero: a random locally administered
// one) are filled in.
func ENET1(cfg fec.Config) (*fec.NIC, error) {
	if cfg.MAC == ([6]byte{}) {
		getRandomData(cfg.MAC[:])
		cfg.MAC[0] = cfg.MAC[0]&^1 | 2 // unicast, locally administered
	}
	caps, err := fec.CapsFor(fec.IMX7D)
	if err != nil {
		return nil, err
	}
	cfg.Regs = mmio.Block{Base: ENET1Base}
	cfg.IPGClock = enetAXIRate(mmio.Block{Base: CCMBase}.Read32(ccmTargetRootENETAXI))
	cfg.Mem = Memory()
	cfg.Caps = caps
	cfg.Interface = fec.RGMII // the SABRE's BCM54220
	cfg.Interrupts = true
	n, err := fec.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("mcimx7d: ENET1: %w", err)
	}
	if err := n.Init(); err != nil {
		return nil, fmt.Errorf("mcimx7d: ENET1 init: %w", err)
	}
	// The link is watched as on every board (board/internal/phylink).
	// The PHY is not reset: the RGMII delays of the SABRE's BCM54220 are
	// the boot loader's, and not known here to be set again after a soft
	// reset. Where no PHY answers (QEMU 8.1 and later reach none through
	// ENET1's MDIO) the link stays as Init assumed it.
	if _, err := phylink.Start(n, phylink.Config{Name: "mcimx7d: ENET1", NoReset: true, Log: os.Stdout}, nil); err != nil {
		return nil, err
	}
	// IRQs are unmasked by ServiceInterrupts once its goroutine sleeps
	// (unmasking earlier loses an interrupt that arrives first).
	GIC.Init(true, false)
	GIC.EnableInterrupt(ENET1IRQ, true)
	GIC.EnableInterrupt(ENET1IRQ0, true)
	tickless.EnableTimerInterrupts(GIC)
	go arm.ServiceInterrupts(func() {
		for {
			id := GIC.GetInterrupt(true)
			switch {
			case id >= 1020:
				return
			case id == ENET1IRQ || id == ENET1IRQ0:
				t0 := ARM.GetTime()
				_, _ = n.Interrupt()
				irqNs.Add(ARM.GetTime() - t0)
				irqs.Add(1)
			case idle.Alarm(id):
			default:
				if h := pcieIRQ.Load(); h != nil && h.id == id {
					t0 := ARM.GetTime()
					h.fn()
					h.ns.Add(ARM.GetTime() - t0)
					h.n.Add(1)
				}
			}
		}
	})
	idle.Serve()
	return n, nil
}

// irqHandler is the one PCIe device interrupt the service loop
// dispatches besides ENET1 and the timer.
type irqHandler struct {
	id    int
	fn    func()
	n, ns atomic.Int64
}

var pcieIRQ atomic.Pointer[irqHandler]

// E1000E attaches the 82574L d found on rc's bus: BAR0 through the
// memory window, bus mastering, rings and buffers in the board's DMA
// region, and its interrupt serviced by the board's interrupt loop: INTx
// (level, GIC interrupt d.IRQ after swizzling), or with msi one MSI
// vector through the DesignWare receiver (its SPI, the receiver's status
// acknowledged before the NIC is serviced). ENET1 must be up (it starts
// the GIC and the loop). cfg's Regs, Mem, Nanotime and Delay are filled
// in. The returned function reports interrupts serviced and time spent in
// the handler.
func E1000E(rc *pcie.RC, d *pcie.Device, msi bool, cfg e1000e.Config) (*e1000e.NIC, func() (n, ns int64), error) {
	cfg.Mem = Memory()
	cfg.Nanotime = Nanotime
	cfg.Delay = delay
	mode, id := e1000e.INTx, d.IRQ
	const vector = 0
	if msi {
		// The receiver's address: a bus address in the DMA region that
		// nothing else uses (the device's write never reaches memory).
		b, err := cfg.Mem.Alloc(64, 64, dma.Coherent)
		if err != nil {
			return nil, nil, fmt.Errorf("mcimx7d: MSI target: %w", err)
		}
		if err := rc.EnableMSI(b.Addr()); err != nil {
			return nil, nil, fmt.Errorf("mcimx7d: %w", err)
		}
		mode, id = e1000e.MSI, 32+rc.SoC().MSISPI
	} else if d.IRQ < 32 {
		return nil, nil, fmt.Errorf("mcimx7d: e1000e %v: no INTx interrupt (pin %d, IRQ %d)", d.BDF, d.Pin, d.IRQ)
	}
	n, err := e1000e.Attach(rc, d, mode, vector, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("mcimx7d: %w", err)
	}
	if err := n.Init(); err != nil {
		return nil, nil, fmt.Errorf("mcimx7d: e1000e init: %w", err)
	}
	h := &irqHandler{id: id, fn: func() { n.Interrupt() }}
	if msi {
		h.fn = func() {
			if rc.ServeMSI(nil) > 0 {
				n.Interrupt()
			}
		}
	}
	pcieIRQ.Store(h)
	GIC.EnableInterrupt(id, true)
	go e1000eWatchdog(n)
	return n, func() (int64, int64) { return h.n.Load(), h.ns.Load() }, nil
}

// e1000eWatchdog runs the 82574L's periodic check (e1000e.NIC.Watchdog:
// the PCIe link, then Linux's PHY-hang check, which resets the adapter)
// every e1000e.WatchdogInterval until the NIC is closed. A failing check
// is printed when its error changes, not every 2 s.
func e1000eWatchdog(n *e1000e.NIC) {
	var last string
	for {
		time.Sleep(e1000e.WatchdogInterval)
		err := n.Watchdog()
		if errors.Is(err, e1000e.ErrClosed) {
			return
		}
		if msg := fmt.Sprint(err); err != nil && msg != last {
			fmt.Printf("mcimx7d: e1000e watchdog: %v\n", err)
			last = msg
		} else if err == nil {
			last = ""
		}
	}
}

// delay waits d on the generic timer. The PCIe bring-up runs before the
// network and its waits are short.
func delay(d time.Duration) {
	end := ARM.GetTime() + int64(d)
	for ARM.GetTime() < end {
	}
}

// PCIeReport is the root complex's state for /stats (nic.pcie), and
// PCIeDevice and PCIeBAR what it lists (shared by the boards).
type (
	PCIeReport = pcireport.Report
	PCIeDevice = pcireport.Device
	PCIeBAR    = pcireport.BAR
)

// PCIe starts the root complex, enumerates the bus and returns the report
// (it never fails the boot: a link that does not train, clocks or power
// that do not come up, or a bad device are reported, not fatal). The
// PCIe clocks, the PHY's power domain and the slot's PERST# are the
// board's (pcieGlue): U-Boot does not bring up the i.MX7 PCIe.
func PCIe() (*pcie.RC, PCIeReport) {
	s := pcie.IMX7D
	g := pcieGlue{anatop: mmio.Block{Base: AnatopBase}, ccm: mmio.Block{Base: CCMBase},
		gpc: mmio.Block{Base: GPCBase}, gpio1: mmio.Block{Base: GPIO1Base}, iomuxc: mmio.Block{Base: IOMUXCBase},
		now: Nanotime, delay: delay}
	rc, err := pcie.New(pcie.Config{SoC: s,
		DBI: mmio.Block{Base: uintptr(s.DBIBase)}, GPR: mmio.Block{Base: GPRBase},
		SRC: mmio.Block{Base: SRCBase}, PHY: mmio.Block{Base: PCIePHYBase},
		Cfg: mmio.Block{Base: uintptr(s.ConfigBase)}, Mem: mmio.Block{Base: uintptr(s.MemBase)},
		Nanotime: Nanotime, Delay: delay, Clocks: g.clocks, PERST: g.perst})
	return pcireport.Run(rc, err, true)
}
