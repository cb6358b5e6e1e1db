//go:build tamago && arm

// Command mcimx7d is the tamanic firmware for the i.MX 7Dual SABRE and
// QEMU's mcimx7d-sabre: the PCIe root complex (its devices listed on the
// console and in /stats under nic.pcie), the ENET driver on ENET1, the
// gVisor endpoint and the services of package app. It prints
// "READY ip=... mac=... mode=..." on the console when serving.
//
// The address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware IP=10.0.0.1/24 GATEWAY=10.0.0.2.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/tamanic/tamanic/board/mcimx7d"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
var Mode = "tso"

// controls adds the PCIe report to the NIC's /stats document.
type controls struct {
	*app.NICControls
	pcie mcimx7d.PCIeReport
}

// Stats returns the NIC's members with "pcie" added.
func (c controls) Stats() any {
	m := map[string]any{}
	if b, err := json.Marshal(c.NICControls.Stats()); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	m["pcie"] = c.pcie
	return m
}

func main() {
	boot := time.Now()
	mcimx7d.Init()
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
	_, rep := mcimx7d.PCIe()
	fmt.Printf("PCIE link_up=%v gen=%d width=%d devices=%d", rep.LinkUp, rep.Gen, rep.Width, len(rep.Devices))
	if rep.Error != "" {
		fmt.Printf(" error=%q", rep.Error)
	}
	fmt.Println()
	for _, d := range rep.Devices {
		fmt.Printf("PCIE %s %04x:%04x class=%06x", d.BDF, d.Vendor, d.Device, d.Class)
		for _, b := range d.BARs {
			fmt.Printf(" bar%d=%#x/%#x", b.Index, b.Addr, b.Size)
		}
		if len(d.BAR0) == 2 {
			fmt.Printf(" bar0[0]=%#08x bar0[8]=%#08x", d.BAR0[0], d.BAR0[1])
		}
		for _, p := range d.Problems {
			fmt.Printf(" problem=%q", p)
		}
		fmt.Println()
	}
	var dev *fecdev.Device
	n, err := mcimx7d.ENET1(fec.Config{OnTxDone: func(c any, err error) { dev.Done(c, err) }})
	if err != nil {
		panic(err)
	}
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		Clock: mcimx7d.Nanotime})
	if err != nil {
		panic(err)
	}
	network, err := app.StartNetwork(ep, n.MAC(), netcfg, os.Stdout)
	if err != nil {
		panic(err)
	}
	nc := &app.NICControls{NIC: n, EP: ep, Idle: mcimx7d.IdleNanoseconds, Interrupts: mcimx7d.Interrupts}
	if err := nc.SetMode(Mode, nil); err != nil {
		panic(err)
	}
	srv := &app.Server{Stack: network.Stack, NIC: 1, Net: network, Ctl: controls{nc, rep}, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := nc.Mode()
	m := n.MAC()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		network.Addr(), m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}
