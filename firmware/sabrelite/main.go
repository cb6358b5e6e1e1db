//go:build tamago && arm

// Command sabrelite is the tamanic firmware for the i.MX6Quad SABRE Lite
// and QEMU's sabrelite machine (core 0): the ENET driver in RGMII mode
// with ERR006358 handling, the gVisor endpoint and the services of package
// app (firmware/internal/fwmain). It prints a BOARD line (L2, timer rate,
// PHY, link) and "READY ip=... mac=... mode=..." on the console (UART2)
// when serving; /stats has the board's state under nic.board.
//
// The address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware BOARD=... IP=10.0.0.1/24 GATEWAY=10.0.0.2.
package main

import (
	"fmt"

	"github.com/tamanic/tamanic/board/sabrelite"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
)

// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
var Mode = "tso"

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
	var st boardState
	fwmain.Run(fwmain.Board{
		Init: sabrelite.Init,
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
		Stats: func() map[string]any { return map[string]any{"board": st} },
		Line: func() string {
			s := fmt.Sprintf("BOARD l2=%v timer_hz=%d phy_id=%#08x link=%s", st.L2, st.TimerHz, st.PHYID, st.Link)
			if st.PHYError != "" {
				s += fmt.Sprintf(" phy_error=%q", st.PHYError)
			}
			return s
		},
	}, fwmain.Settings{Mode: Mode})
}
