//go:build tamago && arm

// Command mx6ullevk is the tamanic firmware for the MCIMX6ULL-EVK and QEMU's
// mcimx6ul-evk: the ENET driver, the gVisor endpoint and the services of
// package app. It prints "READY ip=... mac=... mode=..." on the console when
// serving.
//
// The address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware IP=10.0.0.1/24 GATEWAY=10.0.0.2.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/tamanic/tamanic/board/mx6ullevk"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
var Mode = "tso"

func main() {
	boot := time.Now()
	mx6ullevk.Init()
	defer func() {
		// A panic is printed on the console before the board halts.
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	netcfg, err := app.BuildNetConfig()
	if err != nil {
		panic(err)
	}
	var dev *fecdev.Device
	n, err := mx6ullevk.ENET1(fec.Config{OnTxDone: func(c any, err error) { dev.Done(c, err) }})
	if err != nil {
		panic(err)
	}
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		Clock: mx6ullevk.Nanotime})
	if err != nil {
		panic(err)
	}
	network, err := app.StartNetwork(ep, n.MAC(), netcfg, os.Stdout)
	if err != nil {
		panic(err)
	}
	ctl := &app.NICControls{NIC: n, EP: ep, Idle: mx6ullevk.IdleNanoseconds, Interrupts: mx6ullevk.Interrupts}
	if err := ctl.SetMode(Mode, nil); err != nil {
		panic(err)
	}
	srv := &app.Server{Stack: network.Stack, NIC: 1, Net: network, Ctl: ctl, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := ctl.Mode()
	m := n.MAC()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		network.Addr(), m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}
