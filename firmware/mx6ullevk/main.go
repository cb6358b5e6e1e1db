//go:build tamago && arm

// Command mx6ullevk is the tamanic firmware for the MCIMX6ULL-EVK and QEMU's
// mcimx6ul-evk: the ENET driver, the gVisor endpoint and the services of
// package app. It prints "READY ip=... mac=... mode=..." on the console when
// serving.
//
// The address is set at build time:
//
//	-ldflags "-X main.IP=10.0.0.1/24 -X main.Gateway=10.0.0.2"
package main

import (
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"time"

	"github.com/tamanic/tamanic/board/mx6ullevk"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// Build-time settings.
var (
	IP      = "10.0.0.1/24"
	Gateway = "10.0.0.2"
	Mode    = "tso"
)

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
	addr, err := netip.ParsePrefix(IP)
	if err != nil {
		panic(fmt.Sprintf("IP %q: %v", IP, err))
	}
	gw, err := netip.ParseAddr(Gateway)
	if err != nil {
		panic(fmt.Sprintf("Gateway %q: %v", Gateway, err))
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
	s, err := app.NewStack(ep, n.MAC(), addr, gw)
	if err != nil {
		panic(err)
	}
	ctl := &app.NICControls{NIC: n, EP: ep, Idle: mx6ullevk.IdleNanoseconds, Interrupts: mx6ullevk.Interrupts}
	if err := ctl.SetMode(Mode, nil); err != nil {
		panic(err)
	}
	srv := &app.Server{Stack: s, NIC: 1, Addr: tcpip.AddrFrom4(addr.Addr().As4()), Ctl: ctl, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := ctl.Mode()
	m := n.MAC()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		addr, m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}
