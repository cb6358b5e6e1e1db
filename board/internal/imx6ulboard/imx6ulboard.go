//go:build tamago && arm

// Package imx6ulboard is what the i.MX6UL/ULL boards share on top of
// TamaGo's imx6ul SoC package: the memory layout with its DMA region, the
// hand-over of an ENET from TamaGo's driver (which does clocks, PLL, pads
// and the board's PHY set-up) to package fec, and the interrupt goroutine
// with the shared tickless governor. A board package (board/usbarmory)
// holds only what differs: which ENET, which TamaGo board package, the
// PHY and its link (board/mx6ullevk, board/usbarmory).
package imx6ulboard

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/soc/nxp/enet"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/board/internal/physmem"
	"github.com/tamanic/tamanic/board/internal/tickless"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/mmio"
)

// Memory layout of the 512 MiB boards: built with the `linkramsize` tag
// (the board package sets goos.RamSize to GoRAMSize), the Go runtime gets
// the first 480 MiB and the top 32 MiB are the DMA region.
const (
	RAMStart  = 0x80000000
	RAMSize   = 512 << 20
	GoRAMSize = 480 << 20
	DMAStart  = RAMStart + GoRAMSize
	DMASize   = RAMSize - GoRAMSize
	// CoherentSize of the DMA region holds descriptor rings; the rest
	// holds driver buffers.
	CoherentSize = 1 << 20
)

// Board is the state of one board's bring-up.
type Board struct {
	irqs  atomic.Int64 // ENET interrupts serviced
	irqNs atomic.Int64 // time in the ENET handler
	idle  *tickless.Governor
}

// Init installs the tickless idle governor on the generic timer. The SoC
// and console must be up (the TamaGo board package's Init).
func Init() *Board {
	return &Board{idle: tickless.Install(imx6ul.ARM)}
}

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler.
func (b *Board) Interrupts() (n, ns int64) { return b.irqs.Load(), b.irqNs.Load() }

// Nanotime is the clock the board's counters and gVisor's clock use:
// TamaGo's runtime clock (imx6ul.ARM.GetTime) in integer arithmetic
// (tickless.Nanotime).
func Nanotime() int64 { return tickless.Nanotime(imx6ul.ARM) }

// IdleNanoseconds returns the time spent idle since Init.
func (b *Board) IdleNanoseconds() int64 { return b.idle.IdleNanoseconds() }

// Memory returns the DMA memory as TamaGo maps it, uncached: TamaGo maps
// only the runtime's RAM cacheable and the DMA region is a device region,
// so its Cached part is declared Uncached; Go heap memory TX maps in place
// is cleaned by address range (Cortex-A7, L2 integrated, no PL310). The
// boards use CacheableMemory; this is for a firmware that keeps TamaGo's
// mapping.
func Memory() *dma.System { return system(true) }

// remapOnce guards the one-time MMU remap of CacheableMemory (a property
// of the SoC's translation table, not of a driver) and the one System on
// it (two would hand out the same memory twice).
var (
	remapOnce sync.Once
	cacheable *dma.System
)

// CacheableMemory returns the DMA memory with its buffer part made
// cacheable.
//
// TamaGo's MMU setup (arm.CPU.InitMMU) maps only the runtime's RAM
// (runtime.MemRegion: the first GoRAMSize bytes) as normal memory; every
// other section is strongly ordered (TEX=000 C=0 B=0). On ARMv7 every
// access to strongly ordered memory goes to the bus on its own, in program
// order, with no cache and no write merging (ARM Architecture Reference
// Manual ARMv7-A/R, A3.5 "Memory types and attributes"), so on silicon each
// received byte was read from DRAM twice (software checksum, then the copy
// or the stack's parse) and every bounce copy and TSO header was written a
// word at a time. The first call remaps the buffer part of the DMA region
// as normal memory, write-back cacheable (TEX=000 C=1 B=1,
// arm.MemoryRegion), one 1 MiB section at a time; the descriptor rings
// (Coherent, the first MiB) stay strongly ordered so the driver's 32-bit
// descriptor stores reach the uDMA in order without maintenance. Buffers
// are then kept coherent by range maintenance (clean before the uDMA reads,
// invalidate before the CPU reads: dma.System with dma.ARMv7Cache), which
// the driver does on every path (TestDMAMaintenanceIsCompleteOnEveryPath).
// QEMU models no cache: there the remap changes nothing but the
// maintenance instructions it executes.
func CacheableMemory() *dma.System {
	remapOnce.Do(func() {
		imx6ul.ARM.ConfigureMMU(DMAStart+CoherentSize, DMAStart+DMASize, 0, arm.MemoryRegion|arm.TTE_EXECUTE_NEVER)
		dma.TranslationBarrier() // DSB, ISB after ConfigureMMU's TLBIALL
		cacheable = system(false)
	})
	return cacheable
}

// system is the DMA region as a dma.System, its Cached part declared
// uncached or not.
func system(uncached bool) *dma.System {
	return dma.NewSystem(dma.SystemConfig{
		Coherent: dma.RegionConfig{Mem: physmem.Region(DMAStart, CoherentSize), Base: DMAStart},
		Cached: dma.RegionConfig{Mem: physmem.Region(DMAStart+CoherentSize, DMASize-CoherentSize), Base: DMAStart + CoherentSize,
			Uncached: uncached},
		RAMStart: RAMStart, RAMEnd: RAMStart + GoRAMSize,
		Cache: dma.ARMv7Cache{},
	})
}

// ENET brings eth up through TamaGo's driver (clock gate, ENET PLL, pads,
// the PHY set-up its board package installed), then resets the MAC and
// returns a fec.NIC on it, initialised and interrupt-driven through the
// GIC on irq. cfg's Regs, Caps and MAC are filled in, and Mem when nil
// (with CacheableMemory: the buffers in normal cacheable memory). link, when set, runs on the initialised NIC before
// interrupts are enabled (the board's PHY and link watch).
func (b *Board) ENET(eth *enet.ENET, irq int, cfg fec.Config, link func(*fec.NIC) error) (*fec.NIC, error) {
	eth.Init()
	if len(eth.MAC) == 6 {
		copy(cfg.MAC[:], eth.MAC)
	}
	soc := fec.IMX6ULL
	if imx6ul.Family == imx6ul.IMX6UL {
		soc = fec.IMX6UL
	}
	caps, err := fec.CapsFor(soc)
	if err != nil {
		return nil, err
	}
	cfg.Regs = mmio.Block{Base: uintptr(eth.Base)}
	if cfg.Mem == nil {
		cfg.Mem = CacheableMemory()
	}
	cfg.Caps = caps
	cfg.Interrupts = true
	n, err := fec.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("imx6ul: ENET%d: %w", eth.Index, err)
	}
	if err := n.Init(); err != nil {
		return nil, fmt.Errorf("imx6ul: ENET%d init: %w", eth.Index, err)
	}
	if link != nil {
		if err := link(n); err != nil {
			return nil, err
		}
	}
	// IRQs are unmasked by ServiceInterrupts itself once its goroutine
	// sleeps: unmasking them earlier loses an interrupt that arrives
	// before the handler goroutine exists, and IRQs then stay masked for
	// good.
	imx6ul.GIC.Init(true, false)
	imx6ul.GIC.EnableInterrupt(irq, true)
	tickless.EnableTimerInterrupts(imx6ul.GIC)
	go arm.ServiceInterrupts(func() {
		for {
			id := imx6ul.GIC.GetInterrupt(true)
			switch {
			case id >= 1020:
				return
			case id == irq:
				t0 := imx6ul.ARM.GetTime()
				_, _ = n.Interrupt()
				b.irqNs.Add(imx6ul.ARM.GetTime() - t0)
				b.irqs.Add(1)
			case b.idle.Alarm(id):
				// The idle governor's alarm: waking the core was all
				// it was for.
			}
		}
	})
	b.idle.Serve()
	return n, nil
}
