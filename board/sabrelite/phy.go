package sabrelite

import (
	"fmt"
	"io"
	"time"

	"github.com/tamanic/tamanic/board/internal/phylink"
	"github.com/tamanic/tamanic/fec"
)

// Micrel KSZ9021 RGMII PHY (KSZ9021RL/RN datasheet rev 1.2, "Register
// Map" and "Extended Registers"): the extended registers are reached
// through register 0x0B (address, bit 15 set to write) and 0x0C (write
// data) / 0x0D (read data).
const (
	KSZ9021ID     = 0x00221610 // PHYID1:PHYID2, revision nibble masked
	KSZ9021IDMask = 0xFFFFFFF0

	KSZ9021_EXTREG       = 0x0B
	KSZ9021_EXTREG_WRITE = 0x8000
	KSZ9021_EXTREG_WDATA = 0x0C

	// Extended registers: RGMII pad skews, 4 bits per signal (Linux
	// drivers/net/phy/micrel.c converts device-tree picoseconds at 200 ps
	// a step; 0 is the minimum delay, 0xF the maximum).
	KSZ9021_CLK_PAD_SKEW     = 0x104 // [15:12] RXC, [11:8] RXDV, [7:4] TXC, [3:0] TXEN
	KSZ9021_RX_DATA_PAD_SKEW = 0x105 // RXD3..RXD0
	KSZ9021_TX_DATA_PAD_SKEW = 0x106 // TXD3..TXD0

	// SABRE Lite skews (Linux imx6qdl-sabrelite.dtsi: rxc-skew-ps and
	// txc-skew-ps 3000, every other signal 0; U-Boot's board file writes
	// the same 0xF0F0/0/0): the clocks at the maximum delay, data and
	// controls at the minimum, which with the board's traces centres the
	// data eye on both clock edges.
	SabreLiteClkSkew    = 0xF0F0
	SabreLiteRxDataSkew = 0x0000
	SabreLiteTxDataSkew = 0x0000

	// PHYAddr is the KSZ9021's MDIO address on the SABRE Lite (dtsi
	// ethernet-phy@6: its strapping pins).
	PHYAddr = 6
)

// PHYTimeouts bound the PHY reset and autonegotiation.
var (
	PHYResetTimeout = 500 * time.Millisecond
	ANTimeout       = 5 * time.Second
)

// SetupPHY takes over the PHY the way every board does
// (board/internal/phylink): it finds the PHY (address 6 on the SABRE Lite;
// any address under QEMU, whose emulated PHY is not a KSZ9021), resets it,
// programs the KSZ9021's RGMII skews when that is the PHY, autonegotiates
// (1000 full advertised, RGMII), programs the MAC for the result and
// watches the link until stop is closed (nil: for as long as the board
// runs), so the MAC follows a flap or a partner at another speed, each
// change written on log (nil: none). It
// returns the PHY's ID and the link; a link not up yet is reported as an
// error but watched all the same.
//
// The KSZ9021's hardware reset line (GPIO3_IO23 on the SABRE Lite) and
// its strap pins are not driven here: the boot loader has done that.
func SetupPHY(n *fec.NIC, stop <-chan struct{}, log io.Writer) (uint32, fec.Link, error) {
	addrs := []int{PHYAddr}
	for a := 0; a < 32; a++ {
		if a != PHYAddr {
			addrs = append(addrs, a)
		}
	}
	var id uint32
	skews := func(p *fec.PHY) error {
		var err error
		if id, err = p.ID(); err != nil {
			return fmt.Errorf("PHY ID: %w", err)
		}
		if id&KSZ9021IDMask != KSZ9021ID {
			return nil
		}
		for _, w := range [][2]uint16{
			{KSZ9021_CLK_PAD_SKEW, SabreLiteClkSkew},
			{KSZ9021_RX_DATA_PAD_SKEW, SabreLiteRxDataSkew},
			{KSZ9021_TX_DATA_PAD_SKEW, SabreLiteTxDataSkew},
		} {
			if err := n.MDIOWrite(p.Addr, KSZ9021_EXTREG, KSZ9021_EXTREG_WRITE|w[0]); err != nil {
				return fmt.Errorf("KSZ9021 skew: %w", err)
			}
			if err := n.MDIOWrite(p.Addr, KSZ9021_EXTREG_WDATA, w[1]); err != nil {
				return fmt.Errorf("KSZ9021 skew: %w", err)
			}
		}
		return nil
	}
	p, err := phylink.Start(n, phylink.Config{Name: "sabrelite: ENET", Link: fec.LinkConfig{Addrs: addrs,
		ResetTimeout: PHYResetTimeout, ANTimeout: ANTimeout, AfterReset: skews}, Log: log}, stop)
	switch {
	case err != nil:
		return id, fec.Link{}, err
	case p == nil:
		return 0, fec.Link{}, fmt.Errorf("sabrelite: %w", fec.ErrNoPHY)
	}
	l := n.Link()
	if !l.Up {
		return id, l, fmt.Errorf("sabrelite: PHY %d: link not up after autonegotiation (watched)", p.Addr)
	}
	return id, l, nil
}
