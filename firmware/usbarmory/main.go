//go:build tamago && arm

// Command usbarmory is the tamanic firmware for the USB armory Mk II LAN
// and QEMU's mcimx6ul-evk with the network on ENET2: the ENET driver on
// ENET2, the gVisor endpoint and the services of package app
// (firmware/internal/fwmain). It prints a BOARD line and "READY ip=...
// mac=... mode=..." on the console (UART2) when serving.
//
// The address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware BOARD=... IP=10.0.0.1/24 GATEWAY=10.0.0.2.
package main

import (
	"github.com/tamanic/tamanic/board/usbarmory"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
)

// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
var Mode = "tso"

func main() {
	fwmain.Run(fwmain.Board{
		Init:     func() error { usbarmory.Init(); return nil },
		ENET:     usbarmory.ENET2,
		Nanotime: usbarmory.Nanotime, Idle: usbarmory.IdleNanoseconds, Interrupts: usbarmory.Interrupts,
		Line: func() string { return "BOARD model=" + usbarmory.Model() + " enet=2" },
	}, fwmain.Settings{Mode: Mode})
}
