//go:build tamago && arm

package main

import (
	"fmt"
	"time"

	"github.com/tamanic/tamanic/board/mcimx7d"
	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/firmware/internal/cxnic"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
	"github.com/tamanic/tamanic/pcie"
)

// Build-time settings of the ConnectX interface.
var (
	// CXIP is the ConnectX interface's static address and prefix
	// ("10.0.3.1/24"); empty, the default: DHCP, its own client. CXGateway
	// is its static gateway (the default route stays with the interface
	// that first has one: ENET1's, as a rule). CXDHCP is "on", "off" or
	// empty, as app.BuildDHCP: "on" with CXIP falls back to CXIP without a
	// lease. They are read as app.ParseNetConfig reads ENET1's.
	CXIP      = ""
	CXGateway = ""
	CXDHCP    = ""
	// CXMode is its initial TX mode: "tso" (the card segments: LSO) or
	// "sg" (no LSO; checksums still offloaded).
	CXMode = "tso"
)

// cxNIC is the ConnectX's NIC ID in the stack (ENET1 is 1, the 82574L 2).
const cxNIC = 3

// addConnectX brings up the first ConnectX function on rc's bus (or an
// ivshmem function standing in for one) as NIC 3 of n's stack, takes its
// address (DHCP or static, CXIP) and serves on it
// (firmware/internal/cxnic). It returns nil, nil when there is none.
func addConnectX(n *app.Network, rc *pcie.RC, boot time.Time) (*cxnic.Controls, error) {
	d, transport, bar := mcimx7d.FindConnectX(rc.Devices())
	if d == nil {
		return nil, nil
	}
	cfg, err := app.ParseNetConfig(CXIP, CXGateway, CXDHCP)
	if err != nil {
		return nil, fmt.Errorf("connectx: %w", err)
	}
	return cxnic.Add(n, cxnic.Options{NIC: cxNIC, Net: cfg, Mode: CXMode, Clock: mcimx7d.Nanotime, Idle: mcimx7d.IdleNanoseconds,
		Limits: app.DefaultLimits.Split(Interfaces), SelfTest: fwmain.SelfTest},
		func() (cxnic.Card, error) {
			nic, w, err := mcimx7d.ConnectX(rc, d, transport, bar, connectx.Config{CmdTimeout: cxnic.CmdTimeout})
			if err != nil {
				return cxnic.Card{}, err
			}
			return cxnic.Card{NIC: nic, Window: w, Transport: transport, BDF: d.BDF, BAR0: d.BARs[bar].Addr}, nil
		}, boot)
}
