//go:build tamago && arm

package main

import (
	"time"

	"github.com/tamanic/tamanic/board/mcimx7d"
	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/firmware/internal/cxnic"
	"github.com/tamanic/tamanic/pcie"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Build-time settings of the ConnectX interface.
var (
	// CXIP is the ConnectX interface's address and prefix.
	CXIP = "10.0.3.1/24"
	// CXMode is its initial TX mode: "tso" (the card segments: LSO) or
	// "sg" (no LSO; checksums still offloaded).
	CXMode = "tso"
)

// cxNIC is the ConnectX's NIC ID in the stack (ENET1 is 1, the 82574L 2).
const cxNIC = 3

// addConnectX brings up the first ConnectX function on rc's bus (or an
// ivshmem function standing in for one) as NIC 3 of s and serves on it
// (firmware/internal/cxnic). It returns nil, nil when there is none.
func addConnectX(s *stack.Stack, rc *pcie.RC, boot time.Time) (*cxnic.Controls, error) {
	d, transport, bar := mcimx7d.FindConnectX(rc.Devices())
	if d == nil {
		return nil, nil
	}
	return cxnic.Add(s, cxnic.Options{NIC: cxNIC, IP: CXIP, Mode: CXMode, Clock: mcimx7d.Nanotime, Idle: mcimx7d.IdleNanoseconds},
		func() (cxnic.Card, error) {
			nic, w, err := mcimx7d.ConnectX(rc, d, transport, bar, connectx.Config{CmdTimeout: cxnic.CmdTimeout})
			if err != nil {
				return cxnic.Card{}, err
			}
			return cxnic.Card{NIC: nic, Window: w, Transport: transport, BDF: d.BDF, BAR0: d.BARs[bar].Addr}, nil
		}, boot)
}
