//go:build tamago && arm

// Package mx6ullevk brings up the tamanic ENET driver on the NXP
// MCIMX6ULL-EVK and on QEMU's mcimx6ul-evk machine, on top of TamaGo's
// board and SoC packages.
//
// Memory: the EVK has 512 MiB of DDR at 0x80000000. Built with the
// `linkramsize` tag, the Go runtime gets the first 480 MiB and the top
// 32 MiB become the DMA region. TamaGo maps everything outside the runtime's
// RAM as strongly ordered device memory; Memory remaps the DMA region's
// buffer part (all but its first MiB, which holds the descriptor rings and
// stays strongly ordered) as normal write-back cacheable memory, and the
// driver's range maintenance (dma.ARMv7Cache: Cortex-A7, L2 integrated, no
// PL310) keeps it coherent with the uDMA. Packet memory on the Go heap that
// TX references in place is cleaned by address range too. QEMU ignores
// cache maintenance; the board does not.
//
// ENET1 is used (QEMU wires -nic to it). TamaGo's own ENET1 instance does
// the silicon bring-up it has been tested with (clock gate, ENET PLL at
// 50 MHz for RMII, pad muxing, KSZ8081 RMII configuration), then the MAC is
// reset and handed to package fec, which resets the PHY again,
// autonegotiates (TamaGo forces 100 Mb/s full duplex with autonegotiation
// off: a duplex mismatch against an autonegotiating switch) and watches the
// link.
package mx6ullevk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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
	// holds driver buffers. Both are whole 1 MiB MMU sections.
	CoherentSize = 1 << 20
	// LinkPoll is the interval of the PHY link poll (one MDIO read of BMSR,
	// about 30 us at 2.5 MHz MDC).
	LinkPoll = 500 * time.Millisecond
)

// KSZ8081RNB registers the EVK needs after every PHY reset (KSZ8081RNB
// datasheet, register 0x1F "PHY Control 2"; the values TamaGo's board
// package writes): HP auto MDI/MDI-X, RMII 50 MHz clock mode (the EVK feeds
// the PHY the SoC's 50 MHz reference), LED mode 01.
const (
	kszPHYCtrl2       = 0x1F
	kszCtrl2HPMDIX    = 1 << 15
	kszCtrl2RMII50MHz = 1 << 7
	kszCtrl2LEDMode1  = 1 << 4
)

// ksz8081AfterReset restores the EVK's PHY settings a soft reset clears.
func ksz8081AfterReset(p *fec.PHY) error {
	return p.NIC.MDIOWrite(p.Addr, kszPHYCtrl2, kszCtrl2HPMDIX|kszCtrl2RMII50MHz|kszCtrl2LEDMode1)
}

var remapOnce sync.Once

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
func Memory() *dma.System {
	remapOnce.Do(func() {
		imx6ul.ARM.ConfigureMMU(DMAStart+CoherentSize, DMAStart+DMASize, 0, arm.MemoryRegion|arm.TTE_EXECUTE_NEVER)
	})
	return dma.NewSystem(dma.SystemConfig{
		Coherent: dma.RegionConfig{Mem: region(DMAStart, CoherentSize), Base: DMAStart},
		Cached:   dma.RegionConfig{Mem: region(DMAStart+CoherentSize, DMASize-CoherentSize), Base: DMAStart + CoherentSize},
		RAMStart: RAMStart, RAMEnd: RAMStart + GoRAMSize,
		Cache: dma.ARMv7Cache{},
	})
}

// ENET1 brings up ENET1 and returns a fec.NIC on it, initialised,
// interrupt-driven, with the link autonegotiated and watched. cfg's Regs,
// Mem, Caps, MAC and IPGClock are filled in.
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
	// MDC is divided from IPG_CLK_ROOT (66 MHz with TamaGo's clock setup).
	cfg.IPGClock = imx6ul.GetPeripheralClock()
	n, err := fec.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("mx6ullevk: ENET1: %w", err)
	}
	if err := n.Init(); err != nil {
		return nil, fmt.Errorf("mx6ullevk: ENET1 init: %w", err)
	}
	// ENET1's KSZ8081 answers at MDIO address 2 (QEMU 7.2 wires the same
	// address); the MDIO pads are muxed to ENET1 by TamaGo's bring-up.
	// QEMU 8.1 and later reach both EVK PHYs through ENET2's MDIO only:
	// there ENET1 finds no PHY and runs at the 100 Mb/s full duplex Init
	// assumed, unwatched.
	switch phy, err := n.StartLink(fec.LinkConfig{Addrs: []int{2}, AfterReset: ksz8081AfterReset}); {
	case errors.Is(err, fec.ErrNoPHY):
		fmt.Printf("mx6ullevk: ENET1: %v; link not managed\n", err)
	case err != nil:
		return nil, fmt.Errorf("mx6ullevk: ENET1 link: %w", err)
	default:
		go phy.WatchLink(LinkPoll, nil)
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
