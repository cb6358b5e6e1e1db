//go:build tamago && arm

// Package sabrelite brings up the tamanic drivers on the i.MX6Quad SABRE
// Lite (BD-SL-i.MX6) and QEMU's sabrelite machine, core 0 only. TamaGo has
// no i.MX6Q support, so this package provides it (runtime.go): the
// runtime hooks, the Cortex-A9 global timer as the clock and the idle
// alarm (the A9 has no generic timer), the UART2 console, the A9 MPCore
// GIC, L1 and the PL310 L2; plus ENET through package fec in RGMII
// gigabit mode with its KSZ9021 PHY, and the tickless idle governor
// shared with the other boards.
//
// Memory: DDR starts at 0x1000_0000 (1 GiB on the SABRE Lite). The Go
// runtime gets the first 480 MiB, the 96 MiB above it are the DMA region
// (sized for a ConnectX's firmware pages), which TamaGo's MMU setup maps
// strongly ordered (everything outside the runtime's RAM) and Memory
// remaps cacheable but for its first MiB; the rest is unused. Buffers and
// the Go heap memory that TX maps in place are maintained through L1 and
// the PL310 (dma.ARMv7Cache with Outer set, dma.TwoLevel's order).
//
// What is only known to work under QEMU 7.2: QEMU emulates no PL310 (the
// L2 path is checked against the host model, dma/dmatest), a PHY that is
// not a KSZ9021 (the skew writes have not run on silicon here), and the
// ENET as presented: no CCM ENET PLL, GPR1 clock selection or RGMII pad
// muxing are done (on silicon U-Boot has done those).
package sabrelite

import (
	// cpuinit, zeroing .bss and .noptrbss, in the linkcpuinit build.
	_ "github.com/tamanic/tamanic/internal/boot"

	"fmt"
	"os"
	"sync/atomic"

	"github.com/usbarmory/tamago/arm"

	"github.com/tamanic/tamanic/board/internal/physmem"
	"github.com/tamanic/tamanic/board/internal/tickless"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/mmio"
)

// IC is the interrupt controller in the SCU's private region.
var IC = &GIC{Dist: mmio.Block{Base: PeriphBase + GICD_OFF}, CPU: mmio.Block{Base: PeriphBase + GICC_OFF}}

// Native reports whether this is silicon rather than QEMU, whose i.MX6
// reports silicon revision 0 in DIGPROG (as TamaGo's imx6ul package
// decides).
func Native() bool {
	return mmio.Block{Base: AnatopBase}.Read32(ANADIG_DIGPROG)&0xFFFF != 0
}

// GlobalTimerHz is the global timer's rate: PERIPHCLK, half the ARM core
// clock (Linux clk-imx6q.c "twd" = arm/2), from PLL1 and ARM_PODF as the
// boot loader left them. QEMU's a9gtimer counts every 10 ns at prescaler
// 0, whatever its CCM says.
func GlobalTimerHz() uint64 {
	if !Native() {
		return 100_000_000
	}
	div := uint64(mmio.Block{Base: AnatopBase}.Read32(ANADIG_PLL_ARM) & 0x7F)
	podf := uint64(mmio.Block{Base: CCMBase}.Read32(CCM_CACRR)&7) + 1
	return 24_000_000 * div / 2 / podf / 2
}

var (
	irqs  atomic.Int64 // ENET interrupts serviced
	irqNs atomic.Int64 // time in the ENET handler
	idle  *tickless.Governor
)

// Init installs the shared tickless idle governor on the global timer and
// reports an L2 that failed to come up. The console, timer and caches are
// already up (hwinit1).
func Init() error {
	idle = tickless.InstallTimer(Timer)
	return l2Err
}

// L2 reports whether the PL310 is on.
func L2() bool { return l2On }

// Nanotime is the clock the board's counters use.
func Nanotime() int64 { return Timer.Now() }

// IdleNanoseconds returns the time spent idle since Init.
func IdleNanoseconds() int64 { return idle.IdleNanoseconds() }

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler.
func Interrupts() (n, ns int64) { return irqs.Load(), irqNs.Load() }

var memory *dma.System

// Memory returns the DMA memory of the board (one instance: the ENET and
// a PCIe card share it), its buffer part normal write-back cacheable.
//
// TamaGo maps the region strongly ordered (ARM ARM ARMv7-A/R, A3.5: no
// cache, every access on its own to the bus), which on silicon would send
// every byte the endpoint sums and copies out of a receive buffer to DDR
// a word at a time. hwinit1 remaps all but the first MiB (the
// descriptor rings and the ConnectX command queue, Coherent, stay strongly
// ordered) as normal memory, before the PL310 is on (remapDMA), outer and inner write-back (TEX=000 C=1 B=1,
// arm.MemoryRegion, never executable), as the other boards do. Buffers
// are then maintained by address range through L1 and, when EnableL2
// turned it on, the PL310 by physical address (identity mapped here):
// clean inner then outer then CACHE_SYNC before a device reads; inner,
// outer, inner again before the CPU reads (dma.TwoLevel, the order of
// Linux's arch/arm/mm/cache-l2x0.c and dma-mapping.c, checked against
// the two-level model in dma/dmatest). Of the PL310 errata Linux works
// around, 727915 is about background operations by way (only the start-up
// invalidate here, with the L2 off), 753970's dummy sync is applied to
// r3p0 only (l2c310_fixup), and 769419 (no automatic store-buffer drain)
// is met by ending every outer operation with CACHE_SYNC and by keeping
// the rings strongly ordered, never bufferable. QEMU has no PL310 and no
// cache: there the remap changes nothing but the L1 maintenance
// instructions executed.
func Memory() *dma.System {
	if memory != nil {
		return memory
	}
	c := dma.ARMv7Cache{}
	if l2On {
		c.Outer = &dma.PL310{Regs: mmio.Block{Base: PL310Base}}
	}
	memory = dma.NewSystem(dma.SystemConfig{
		Coherent: dma.RegionConfig{Mem: physmem.Region(DMAStart, CoherentSize), Base: DMAStart},
		Cached:   dma.RegionConfig{Mem: physmem.Region(DMAStart+CoherentSize, DMASize-CoherentSize), Base: DMAStart + CoherentSize},
		RAMStart: RAMStart, RAMEnd: RAMStart + GoRAMSize,
		Cache: c,
	})
	return memory
}

// PHYInfo is what SetupPHY found, for the console and /stats.
type PHYInfo struct {
	ID    uint32
	Link  fec.Link
	Error error
}

// ENET returns a fec.NIC on the ENET in RGMII mode, initialised, its link
// autonegotiated and watched, and interrupt-driven. cfg's Regs, Mem, Caps, Interface
// and MAC (when zero: a random locally administered one) are filled in. A
// PHY problem is reported, not fatal: the MAC stays at 100 Mb/s full
// duplex.
func ENET(cfg fec.Config) (*fec.NIC, PHYInfo, error) {
	var pi PHYInfo
	if cfg.MAC == ([6]byte{}) {
		getRandomData(cfg.MAC[:])
		cfg.MAC[0] = cfg.MAC[0]&^1 | 2 // unicast, locally administered
	}
	caps, err := fec.CapsFor(fec.IMX6Q) // gigabit, 16-byte TX alignment (fec re-kicks for ERR006358 on every SoC)
	if err != nil {
		return nil, pi, err
	}
	// enet_clk_enable (ungated by the boot ROM or U-Boot as well).
	ccm := mmio.Block{Base: CCMBase}
	ccm.Write32(CCM_CCGR1, ccm.Read32(CCM_CCGR1)|3<<10)
	cfg.Regs = mmio.Block{Base: ENETBase}
	cfg.Mem = Memory()
	cfg.Caps = caps
	cfg.Interface = fec.RGMII
	cfg.Interrupts = true
	n, err := fec.New(cfg)
	if err != nil {
		return nil, pi, fmt.Errorf("sabrelite: ENET: %w", err)
	}
	if err := n.Init(); err != nil {
		return nil, pi, fmt.Errorf("sabrelite: ENET init: %w", err)
	}
	pi.ID, pi.Link, pi.Error = SetupPHY(n, nil, os.Stdout)
	// IRQs are unmasked by ServiceInterrupts once its goroutine sleeps
	// (unmasking earlier loses an interrupt that arrives first).
	IC.Init()
	IC.Enable(ENETIRQ)
	IC.Enable(GlobalTimerIRQ)
	go arm.ServiceInterrupts(func() {
		for {
			id := IC.Next()
			switch {
			case id >= 1020:
				return
			case id == ENETIRQ:
				t0 := Timer.Now()
				_, _ = n.Interrupt()
				irqNs.Add(Timer.Now() - t0)
				irqs.Add(1)
			case idle.Alarm(id):
			}
		}
	})
	idle.Serve()
	return n, pi, nil
}
