// Package fwmain is the firmware main the boards share: take the address
// by DHCP or from the build (app.BuildNetConfig), bring up the board's ENET, the gVisor endpoint and
// stack, the services of package app, and print the READY line. A
// firmware's main only names its board (firmware/mx6ullevk,
// firmware/sabrelite, firmware/usbarmory; firmware/mcimx7d, with its
// second interface, still carries its own copy of this sequence).
package fwmain

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// Board is what differs between boards.
type Board struct {
	// Init brings up what the board needs before the network (nil: none).
	Init func() error
	// ENET returns the board's NIC, initialised and interrupt-driven,
	// from cfg (whose OnTxDone is set).
	ENET func(cfg fec.Config) (*fec.NIC, error)
	// Nanotime, Idle and Interrupts are the board's clock, idle time and
	// ENET interrupt counters.
	Nanotime   func() int64
	Idle       func() int64
	Interrupts func() (n, ns int64)
	// Stats, when set, is added to /stats under nic.board, and Line, when
	// set, printed on the console before READY.
	Stats func() any
	Line  func() string
}

// Settings are the firmware's build-time settings (the address is
// app.BuildNetConfig's: make firmware IP=... GATEWAY=... DHCP=...).
type Settings struct {
	// Mode is the TX mode at boot.
	Mode string
}

// Run starts the firmware on b and serves forever. A panic is printed on
// the console and the board halts.
func Run(b Board, s Settings) {
	boot := time.Now()
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	if b.Init != nil {
		if err := b.Init(); err != nil {
			panic(err)
		}
	}
	netcfg, err := app.BuildNetConfig()
	if err != nil {
		panic(err)
	}
	var dev *fecdev.Device
	n, err := b.ENET(fec.Config{OnTxDone: func(c any, err error) { dev.Done(c, err) }})
	if err != nil {
		panic(err)
	}
	if b.Line != nil {
		fmt.Println(b.Line())
	}
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true, Clock: b.Nanotime})
	if err != nil {
		panic(err)
	}
	network, err := app.StartNetwork(ep, n.MAC(), netcfg, os.Stdout)
	if err != nil {
		panic(err)
	}
	nc := &app.NICControls{NIC: n, EP: ep, Idle: b.Idle, Interrupts: b.Interrupts}
	if err := nc.SetMode(s.Mode, nil); err != nil {
		panic(err)
	}
	var ctl app.Controls = nc
	if b.Stats != nil {
		ctl = controls{nc, b.Stats}
	}
	srv := &app.Server{Stack: network.Stack, NIC: 1, Net: network, Ctl: ctl, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := nc.Mode()
	m := n.MAC()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		network.Addr(), m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}

// controls adds the board's state to the NIC's /stats document.
type controls struct {
	*app.NICControls
	board func() any
}

// Stats returns the NIC's members with "board" added.
func (c controls) Stats() any {
	m := map[string]any{}
	if b, err := json.Marshal(c.NICControls.Stats()); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	m["board"] = c.board()
	return m
}
