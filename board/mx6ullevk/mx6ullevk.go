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
//
// What the i.MX6UL/ULL boards share (memory layout, ENET hand-over,
// interrupts, idle governor) is board/internal/imx6ulboard; this package
// holds what is the EVK's: its PHY, its link watch, and the cacheable DMA
// buffers (imx6ulboard.CacheableMemory).
package mx6ullevk

import (
	// cpuinit, zeroing .bss and .noptrbss, in the linkcpuinit build.
	_ "github.com/tamanic/tamanic/internal/boot"

	"os"
	_ "unsafe"

	tamagoevk "github.com/usbarmory/tamago/board/nxp/mx6ullevk"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/board/internal/imx6ulboard"
	"github.com/tamanic/tamanic/board/internal/phylink"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/fec"
)

// Memory layout (imx6ulboard's: 512 MiB of DDR, the top 32 MiB for DMA).
const (
	RAMStart     = imx6ulboard.RAMStart
	RAMSize      = imx6ulboard.RAMSize
	GoRAMSize    = imx6ulboard.GoRAMSize
	DMAStart     = imx6ulboard.DMAStart
	DMASize      = imx6ulboard.DMASize
	CoherentSize = imx6ulboard.CoherentSize
	// LinkPoll is the interval of the PHY link poll (one MDIO read of BMSR,
	// about 30 us at 2.5 MHz MDC): phylink's, as on every board.
	LinkPoll = phylink.Poll
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

var board *imx6ulboard.Board

// Init initialises the SoC and console and installs the tickless idle
// governor shared by the boards (package board/internal/tickless), which
// also accounts idle time.
func Init() {
	tamagoevk.Init()
	board = imx6ulboard.Init()
}

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler (TX reclaim and completions, RX wake-up).
func Interrupts() (n, ns int64) { return board.Interrupts() }

// Nanotime is the clock the board's counters use.
func Nanotime() int64 { return imx6ulboard.Nanotime() }

// IdleNanoseconds returns the time spent idle since Init.
func IdleNanoseconds() int64 { return board.IdleNanoseconds() }

// Native reports whether this is silicon rather than an emulator.
func Native() bool { return imx6ul.Native }

// Memory returns the DMA memory of the board, its buffer part remapped
// write-back cacheable (imx6ulboard.CacheableMemory says why and how).
func Memory() *dma.System { return imx6ulboard.CacheableMemory() }

// ENET1 brings up ENET1 and returns a fec.NIC on it, initialised,
// interrupt-driven (ENET1 MAC line, SPI 118), with the link autonegotiated
// and watched. cfg's Regs, Mem, Caps, MAC and IPGClock are filled in.
func ENET1(cfg fec.Config) (*fec.NIC, error) {
	cfg.Mem = Memory()
	// MDC is divided from IPG_CLK_ROOT (66 MHz with TamaGo's clock setup).
	cfg.IPGClock = imx6ul.GetPeripheralClock()
	return board.ENET(imx6ul.ENET1, imx6ul.ENET1_IRQ, cfg, startLink)
}

// startLink starts ENET1's PHY and its watch (board/internal/phylink,
// which every board shares). ENET1's KSZ8081 answers at MDIO address 2
// (QEMU 7.2 wires the same address); the MDIO pads are muxed to ENET1 by
// TamaGo's bring-up. QEMU 8.1 and later reach both EVK PHYs through
// ENET2's MDIO only: there ENET1 finds no PHY and runs at the 100 Mb/s
// full duplex Init assumed, unwatched.
func startLink(n *fec.NIC) error {
	_, err := phylink.Start(n, phylink.Config{Name: "mx6ullevk: ENET1", Poll: LinkPoll, Log: os.Stdout,
		Link: fec.LinkConfig{Addrs: []int{2}, AfterReset: ksz8081AfterReset}}, nil)
	return err
}
