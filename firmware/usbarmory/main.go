//go:build tamago && arm

// Command usbarmory is the tamanic firmware for the USB armory Mk II LAN
// and QEMU's mcimx6ul-evk with the network on ENET2: the ENET driver on
// ENET2, the gVisor endpoint and the services of package app
// (firmware/internal/fwmain). It prints a BOARD line and "READY ip=...
// mac=... mode=..." on the console (UART2) when serving.
//
// The address is set at build time:
//
//	-ldflags "-X main.IP=10.0.0.1/24 -X main.Gateway=10.0.0.2"
package main

import (
	"github.com/tamanic/tamanic/board/usbarmory"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
)

// Build-time settings.
var (
	IP      = "10.0.0.1/24"
	Gateway = "10.0.0.2"
	Mode    = "tso"
)

func main() {
	fwmain.Run(fwmain.Board{
		Init:     func() error { usbarmory.Init(); return nil },
		ENET:     usbarmory.ENET2,
		Nanotime: usbarmory.Nanotime, Idle: usbarmory.IdleNanoseconds, Interrupts: usbarmory.Interrupts,
		Line: func() string { return "BOARD model=" + usbarmory.Model() + " enet=2" },
	}, fwmain.Settings{IP: IP, Gateway: Gateway, Mode: Mode})
}
