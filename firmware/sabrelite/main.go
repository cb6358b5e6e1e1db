//go:build tamago && arm

// Command sabrelite is the tamanic firmware for the i.MX6Quad SABRE Lite
// and QEMU's sabrelite machine (core 0): the ENET driver in RGMII mode
// with ERR006358 handling, the gVisor endpoint and the services of package
// app (firmware/internal/fwmain). It prints a BOARD line (L2, timer rate,
// PHY, link) and "READY ip=... mac=... mode=..." on the console (UART2)
// when serving; /stats has the board's state under nic.board.
//
// On silicon the PCIe root complex is brought up first (its link and
// devices on "PCIE ..." lines and in /stats under nic.pcie). When a
// ConnectX function (Mellanox 15b3, the mlx5 device IDs) is on the bus it
// becomes NIC 2 of the stack, polled, with its own address (by DHCP, its
// own client, like the ENET's) and services (firmware/internal/cxnic);
// /stats reports it under nic.connectx and its lease under
// ipv4.interfaces ("CONNECTX ip=... transport=pcie-15b3" on the console
// once it has its address). Otherwise one
// "CONNECTX none: ..." line says why: under QEMU, whose sabrelite machine
// has no PCIe, no link, or no such function on the bus. The ENET serves
// in every case.
//
// The ENET's address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware BOARD=... IP=10.0.0.1/24 GATEWAY=10.0.0.2.
// The ConnectX's likewise, with its own variables (CXIP, CXGateway, CXDHCP,
// read as app.ParseNetConfig reads the ENET's); static:
// make firmware BOARD=sabrelite CX_IP=10.0.3.1/24 (-ldflags "-X main.CXIP=...").
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/tamanic/tamanic/board/pcireport"
	"github.com/tamanic/tamanic/board/sabrelite"
	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/firmware/internal/cxnic"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
	"github.com/tamanic/tamanic/pcie"
)

// Build-time settings.
var (
	// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
	Mode = "tso"
	// CXIP is the ConnectX interface's static address and prefix
	// ("10.0.3.1/24"); empty, the default: DHCP, its own client. CXGateway
	// is its static gateway (the default route stays with the interface
	// that first has one: the ENET's, as a rule). CXDHCP is "on", "off" or
	// empty, as app.BuildDHCP: "on" with CXIP falls back to CXIP without a
	// lease.
	CXIP      = ""
	CXGateway = ""
	CXDHCP    = ""
	// CXMode is its initial TX mode: "tso" (the card segments: LSO) or
	// "sg" (no LSO; checksums still offloaded).
	CXMode = "tso"
)

// cxNIC is the ConnectX's NIC ID in the stack (the ENET is 1).
const cxNIC = 2

// boardState is what /stats reports of the board.
type boardState struct {
	L2       bool   `json:"l2"`
	TimerHz  uint64 `json:"timer_hz"`
	PHYID    uint32 `json:"phy_id"`
	Link     string `json:"link"`
	PHYError string `json:"phy_error,omitempty"`
	// Caps and Quirks are the ENET integration the driver runs with.
	Caps    string `json:"caps"`
	Quirks  string `json:"quirks"`
	TxAlign int    `json:"tx_align"`
}

func main() {
	var (
		st  boardState
		rc  *pcie.RC
		rep sabrelite.PCIeReport
		cx  *cxnic.Controls
	)
	fwmain.Run(fwmain.Board{
		Init: func() error {
			if err := sabrelite.Init(); err != nil {
				return err
			}
			rc, rep = sabrelite.PCIe()
			if rep.LinkUp {
				pcireport.Print(os.Stdout, rep)
			}
			return nil
		},
		ENET: func(cfg fec.Config) (*fec.NIC, error) {
			n, phy, err := sabrelite.ENET(cfg)
			if err != nil {
				return nil, err
			}
			st = boardState{L2: sabrelite.L2(), TimerHz: sabrelite.Timer.Hz, PHYID: phy.ID, Link: n.Link().String(),
				Caps: n.Caps().Name, Quirks: n.Caps().Quirks.String(), TxAlign: n.Caps().TxAlign}
			if phy.Error != nil {
				st.PHYError = phy.Error.Error()
			}
			return n, nil
		},
		Nanotime: sabrelite.Nanotime, Idle: sabrelite.IdleNanoseconds, Interrupts: sabrelite.Interrupts,
		AttachNet: func(n *app.Network, boot time.Time) error {
			cx = attach(n, rc, rep, boot)
			return nil
		},
		Stats: func() map[string]any {
			m := map[string]any{"board": st, "pcie": rep}
			if cx != nil {
				m["connectx"] = cx.Stats()
			}
			return m
		},
		Line: func() string {
			s := fmt.Sprintf("BOARD l2=%v timer_hz=%d phy_id=%#08x link=%s", st.L2, st.TimerHz, st.PHYID, st.Link)
			if st.PHYError != "" {
				s += fmt.Sprintf(" phy_error=%q", st.PHYError)
			}
			return s
		},
	}, fwmain.Settings{Mode: Mode, Interfaces: Interfaces})
}

// Interfaces is how many interfaces may run the services: the ENET and
// the ConnectX, each with half the default limits (app.Limits.Split).
const Interfaces = 2

// attach adds the ConnectX found on rc's bus to n's stack as NIC 2 with its
// own address and services. Its absence or its error is one line on the
// console, not fatal: the ENET still serves.
func attach(n *app.Network, rc *pcie.RC, rep sabrelite.PCIeReport, boot time.Time) *cxnic.Controls {
	if rc == nil {
		fmt.Printf("CONNECTX none: no PCIe link (%s)\n", rep.Error)
		return nil
	}
	d := sabrelite.FindConnectX(rc.Devices())
	if d == nil {
		fmt.Println("CONNECTX none: no Mellanox 15b3 mlx5 function on the bus")
		return nil
	}
	cfg, err := app.ParseNetConfig(CXIP, CXGateway, CXDHCP)
	if err != nil {
		fmt.Printf("CONNECTX error=%q\n", "connectx: "+err.Error())
		return nil
	}
	cx, err := cxnic.Add(n, cxnic.Options{NIC: cxNIC, Net: cfg, Mode: CXMode, Clock: sabrelite.Nanotime, Idle: sabrelite.IdleNanoseconds,
		Limits: app.DefaultLimits.Split(Interfaces)},
		func() (cxnic.Card, error) {
			nic, w, err := sabrelite.ConnectX(rc, d, connectx.Config{})
			if err != nil {
				return cxnic.Card{}, err
			}
			return cxnic.Card{NIC: nic, Window: w, Transport: sabrelite.TransportPCIe, BDF: d.BDF, BAR0: d.BARs[0].Addr}, nil
		}, boot)
	if err != nil {
		fmt.Printf("CONNECTX error=%q\n", err.Error())
		return nil
	}
	return cx
}
