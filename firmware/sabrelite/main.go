//go:build tamago && arm

// Command sabrelite is the tamanic firmware for the i.MX6Quad SABRE Lite
// and QEMU's sabrelite machine (core 0): the ENET driver in RGMII mode
// with ERR006358 handling, the gVisor endpoint and the services of package
// app. It prints "READY ip=... mac=... mode=..." on the console (UART2)
// when serving; /stats has the board's state under nic.board.
//
// The address is set at build time:
//
//	-ldflags "-X main.IP=10.0.0.1/24 -X main.Gateway=10.0.0.2"
package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"time"

	"github.com/tamanic/tamanic/board/sabrelite"
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

// boardState is what /stats reports of the board.
type boardState struct {
	L2       bool   `json:"l2"`
	TimerHz  uint64 `json:"timer_hz"`
	PHYID    uint32 `json:"phy_id"`
	Link     string `json:"link"`
	PHYError string `json:"phy_error,omitempty"`
}

// controls adds the board's state to the NIC's /stats document.
type controls struct {
	*app.NICControls
	board boardState
}

// Stats returns the NIC's members with "board" added.
func (c controls) Stats() any {
	m := map[string]any{}
	if b, err := json.Marshal(c.NICControls.Stats()); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	m["board"] = c.board
	return m
}

func main() {
	boot := time.Now()
	l2err := sabrelite.Init()
	defer func() {
		// A panic is printed on the console before the board halts.
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	if l2err != nil {
		panic(l2err)
	}
	addr, err := netip.ParsePrefix(IP)
	if err != nil {
		panic(fmt.Sprintf("IP %q: %v", IP, err))
	}
	gw, err := netip.ParseAddr(Gateway)
	if err != nil {
		panic(fmt.Sprintf("Gateway %q: %v", Gateway, err))
	}
	var dev *fecdev.Device
	n, phy, err := sabrelite.ENET(fec.Config{OnTxDone: func(c any, err error) { dev.Done(c, err) }})
	if err != nil {
		panic(err)
	}
	st := boardState{L2: sabrelite.L2(), TimerHz: sabrelite.Timer.Hz, PHYID: phy.ID, Link: n.Link().String()}
	fmt.Printf("BOARD l2=%v timer_hz=%d phy_id=%#08x link=%s", st.L2, st.TimerHz, st.PHYID, st.Link)
	if phy.Error != nil {
		st.PHYError = phy.Error.Error()
		fmt.Printf(" phy_error=%q", st.PHYError)
	}
	fmt.Println()
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		Clock: sabrelite.Nanotime})
	if err != nil {
		panic(err)
	}
	s, err := app.NewStack(ep, n.MAC(), addr, gw)
	if err != nil {
		panic(err)
	}
	nc := &app.NICControls{NIC: n, EP: ep, Idle: sabrelite.IdleNanoseconds, Interrupts: sabrelite.Interrupts}
	if err := nc.SetMode(Mode, nil); err != nil {
		panic(err)
	}
	srv := &app.Server{Stack: s, NIC: 1, Addr: tcpip.AddrFrom4(addr.Addr().As4()), Ctl: controls{nc, st}, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := nc.Mode()
	m := n.MAC()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		addr, m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}
