//go:build tamago && arm

// Package usbarmory brings up the tamanic drivers on the USB armory Mk II
// LAN (UA-MKII-LAN: i.MX6UL, ENET2 wired in RMII to a TI DP83825I PHY at
// MDIO address 0) through TamaGo's board package
// (github.com/usbarmory/tamago/board/usbarmory/mk2), and on QEMU's
// mcimx6ul-evk with the network on ENET2.
//
// TamaGo's mk2 package installs the LAN variant's PHY set-up as ENET2's
// EnablePHY: ENET2 pad muxing (REF_CLK on ENET2_TX_CLK, MDIO/MDC on
// GPIO1_IO06/07), a DP83825I software reset, 100 Mb/s full duplex with
// autonegotiation, and the 50 MHz RMII reference clock. Its ENET2
// instance also ungates the clock and starts the ENET PLL. The MAC is then
// reset and handed to package fec, as on the mx6ullevk, which resets the
// PHY again, reapplies the reference clock setting, autonegotiates and
// watches the link (board/internal/phylink, as every board); the rest
// (memory layout, interrupts, idle governor) is board/internal/imx6ulboard.
//
// Memory: 512 MiB of DDR at 0x8000_0000, split as on the mx6ullevk.
// Console: UART2, as TamaGo's mk2 package sets it (the debug accessory).
package usbarmory

import (
	// cpuinit, zeroing .bss and .noptrbss, in the linkcpuinit build.
	_ "github.com/tamanic/tamanic/internal/boot"

	"os"
	_ "unsafe"

	"github.com/usbarmory/tamago/board/usbarmory/mk2"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/board/internal/imx6ulboard"
	"github.com/tamanic/tamanic/board/internal/phylink"
	"github.com/tamanic/tamanic/fec"
)

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = imx6ulboard.GoRAMSize

var board *imx6ulboard.Board

// Init initialises the SoC and console (TamaGo's mk2.Init) and installs
// the shared tickless idle governor.
func Init() {
	mk2.Init()
	board = imx6ulboard.Init()
}

// Model returns TamaGo's name for the board variant read from the OCOTP,
// or "emulated" under QEMU (which has no fuses: TamaGo's mk2.Model would
// say UA-MKII-β).
func Model() string {
	if !imx6ul.Native {
		return "emulated"
	}
	_, s := mk2.Model()
	return s
}

// Nanotime is the clock the board's counters use.
func Nanotime() int64 { return imx6ulboard.Nanotime() }

// IdleNanoseconds returns the time spent idle since Init.
func IdleNanoseconds() int64 { return board.IdleNanoseconds() }

// Interrupts returns how many ENET interrupts were serviced and the time
// spent in the driver's handler.
func Interrupts() (n, ns int64) { return board.Interrupts() }

// ENET2 brings up ENET2 and returns a fec.NIC on it, initialised,
// interrupt-driven (ENET2 MAC line, SPI 120: imx6ul.ENET2_IRQ), with the
// link autonegotiated and watched (the DP83825I at MDIO address 0; where
// no PHY answers, as under a QEMU whose ENET2 reaches none, the link is
// left as Init assumed it).
func ENET2(cfg fec.Config) (*fec.NIC, error) {
	return board.ENET(mk2.ENET2, imx6ul.ENET2_IRQ, cfg, func(n *fec.NIC) error {
		_, err := phylink.Start(n, phylink.Config{Name: "usbarmory: ENET2", Log: os.Stdout,
			Link: enet2Link()}, nil)
		return err
	})
}
