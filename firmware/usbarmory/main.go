//go:build tamago && arm

// Command usbarmory is the tamanic firmware for the USB armory Mk II LAN
// and QEMU's mcimx6ul-evk with the network on ENET2: the ENET driver on
// ENET2, the gVisor endpoint and the services of package app. It prints
// "READY ip=... mac=... mode=..." on the console (UART2) when serving.
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

	"github.com/tamanic/tamanic/board/usbarmory"
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
	usbarmory.Init()
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
	n, err := usbarmory.ENET2(fec.Config{OnTxDone: func(c any, err error) { dev.Done(c, err) }})
	if err != nil {
		panic(err)
	}
	fmt.Printf("BOARD model=%s enet=2\n", usbarmory.Model())
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		Clock: usbarmory.Nanotime})
	if err != nil {
		panic(err)
	}
	s, err := app.NewStack(ep, n.MAC(), addr, gw)
	if err != nil {
		panic(err)
	}
	ctl := &app.NICControls{NIC: n, EP: ep, Idle: usbarmory.IdleNanoseconds, Interrupts: usbarmory.Interrupts}
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
