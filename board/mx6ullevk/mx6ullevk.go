//go:build tamago && arm

// Package mx6ullevk brings up the tamanic ENET driver on the NXP
// MCIMX6ULL-EVK and on QEMU's mcimx6ul-evk machine, on top of TamaGo's
// board and SoC packages.
//
// Memory: the EVK has 512 MiB of DDR at 0x80000000. Built with the
// `linkramsize` tag, the Go runtime gets the first 480 MiB and the top
// 32 MiB become the DMA region. TamaGo maps everything outside the runtime's
// RAM as device memory (uncached, strongly ordered), so descriptors and
// driver buffers there need no maintenance; packet memory on the Go heap
// that TX references in place is cleaned by address range (dma.ARMv7Cache:
// Cortex-A7, L2 integrated, no PL310). QEMU ignores cache maintenance; the
// board does not.
//
// ENET1 is used (QEMU wires -nic to it). TamaGo's own ENET1 instance does
// the silicon bring-up it has been tested with (clock gate, ENET PLL at
// 50 MHz for RMII, pad muxing, KSZ8081 RMII configuration), then the MAC is
// reset and handed to package fec.
package mx6ullevk

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/usbarmory/tamago/arm"
	tamagoevk "github.com/usbarmory/tamago/board/nxp/mx6ullevk"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/board/internal/tickless"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/internal/mmio"
)

// Memory layout.
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

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = GoRAMSize

var (
	irqs  atomic.Int64 // ENET interrupts serviced
	irqNs atomic.Int64 // time in the ENET handler
	idle  *tickless.Governor
)

// Init initialises the SoC and console and installs the tickless idle
// governor shared by the boards (package board/internal/tickless), which
// also accounts idle time.
func Init() {
	tamagoevk.Init()
	idle = tickless.Install(imx6ul.ARM)
}

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler (TX reclaim and completions, RX wake-up).
func Interrupts() (n, ns int64) { return irqs.Load(), irqNs.Load() }

// Nanotime is the clock the board's counters use.
func Nanotime() int64 { return imx6ul.ARM.GetTime() }

// IdleNanoseconds returns the time spent idle since Init.
func IdleNanoseconds() int64 { return idle.IdleNanoseconds() }

// Native reports whether this is silicon rather than an emulator.
func Native() bool { return imx6ul.Native }

// region returns the CPU view of the DMA region.
func region(start, size uintptr) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(start)), size)
}

// Memory returns the DMA memory of the board.
//
// TamaGo's MMU setup (arm.CPU.InitMMU) maps only the runtime's RAM
// (runtime.MemRegion: the first GoRAMSize bytes) cacheable; every other
// section, the DMA region included, is a device region (C=0, B=0). Driver
// buffers there therefore need no cache maintenance, and the Cached region
// is declared Uncached: syncing its buffers is a barrier. Go heap memory
// that TX maps in place is still cleaned by address range. (Under QEMU the
// maintenance loops were no-ops that still cost about 600 instructions per
// received frame.)
func Memory() *dma.System {
	return dma.NewSystem(dma.SystemConfig{
		Coherent: dma.RegionConfig{Mem: region(DMAStart, CoherentSize), Base: DMAStart},
		Cached: dma.RegionConfig{Mem: region(DMAStart+CoherentSize, DMASize-CoherentSize), Base: DMAStart + CoherentSize,
			Uncached: true},
		RAMStart: RAMStart, RAMEnd: RAMStart + GoRAMSize,
		Cache: dma.ARMv7Cache{},
	})
}

// ENET1 brings up ENET1 and returns a fec.NIC on it, initialised and
// interrupt-driven. cfg's Regs, Mem, Caps and MAC are filled in.
func ENET1(cfg fec.Config) (*fec.NIC, error) {
	// TamaGo's driver brings up clocks, PLL, pads and PHY; ours takes over.
	imx6ul.ENET1.Init()
	if len(imx6ul.ENET1.MAC) == 6 {
		copy(cfg.MAC[:], imx6ul.ENET1.MAC)
	}
	soc := fec.IMX6ULL
	if imx6ul.Family == imx6ul.IMX6UL {
		soc = fec.IMX6UL
	}
	caps, err := fec.CapsFor(soc)
	if err != nil {
		return nil, err
	}
	cfg.Regs = mmio.Block{Base: imx6ul.ENET1_BASE}
	cfg.Mem = Memory()
	cfg.Caps = caps
	cfg.Interrupts = true
	n, err := fec.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("mx6ullevk: ENET1: %w", err)
	}
	if err := n.Init(); err != nil {
		return nil, fmt.Errorf("mx6ullevk: ENET1 init: %w", err)
	}
	// Interrupts through the GIC (ENET1 MAC line, SPI 118). IRQs are
	// unmasked by ServiceInterrupts itself once its goroutine sleeps:
	// unmasking them earlier loses an interrupt that arrives before the
	// handler goroutine exists, and IRQs then stay masked for good.
	imx6ul.GIC.Init(true, false)
	imx6ul.GIC.EnableInterrupt(imx6ul.ENET1_IRQ, true)
	tickless.EnableTimerInterrupts(imx6ul.GIC)
	go arm.ServiceInterrupts(func() {
		for {
			id := imx6ul.GIC.GetInterrupt(true)
			switch {
			case id >= 1020:
				return
			case id == imx6ul.ENET1_IRQ:
				t0 := imx6ul.ARM.GetTime()
				_, _ = n.Interrupt()
				irqNs.Add(imx6ul.ARM.GetTime() - t0)
				irqs.Add(1)
			case idle.Alarm(id):
				// The idle governor's alarm: waking the core was all
				// it was for.
			}
		}
	})
	idle.Serve()
	return n, nil
}
