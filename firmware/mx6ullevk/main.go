//go:build tamago && arm

// Command mx6ullevk is the tamanic firmware for the MCIMX6ULL-EVK and QEMU's
// mcimx6ul-evk: the ENET driver on ENET1, the gVisor endpoint and the
// services of package app (firmware/internal/fwmain). It prints "READY
// ip=... mac=... mode=..." on the console when serving.
//
// The address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware IP=10.0.0.1/24 GATEWAY=10.0.0.2.
package main

import (
	"github.com/tamanic/tamanic/board/mx6ullevk"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
)

// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
var Mode = "tso"

func main() {
	fwmain.Run(fwmain.Board{
		Init:     func() error { mx6ullevk.Init(); return nil },
		ENET:     mx6ullevk.ENET1,
		Nanotime: mx6ullevk.Nanotime, Idle: mx6ullevk.IdleNanoseconds, Interrupts: mx6ullevk.Interrupts,
	}, fwmain.Settings{Mode: Mode})
}
