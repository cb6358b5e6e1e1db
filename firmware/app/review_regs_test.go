package app

import (
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// twinPHY puts a second PHY on the ENET's MDIO bus at address 1, a twin
// of the model's at address 2 (frames to address 1 are answered by the
// PHY at 2): the i.MX6UL EVK's shared bus, where ENET2's KSZ8081 answers
// at 1 and ENET1's at 2 (board/mx6ullevk: ENET1's PHY "answers at MDIO
// address 2"; Linux imx6ul-14x14-evk.dtsi: ethphy0 reg 2, ethphy1 reg 1
// on one mdio node).
type twinPHY struct{ mmio.Regs }

func (r twinPHY) Write32(off, v uint32) {
	if off == fec.ENETx_MMFR && v>>fec.MMFR_PA&31 == 1 {
		v = v&^(31<<fec.MMFR_PA) | 2<<fec.MMFR_PA
	}
	r.Regs.Write32(off, v)
}

// TestReviewDebugRegsDumpsTheDriversPHY: NICControls.Registers dumps "the
// first PHY that answers on its MDIO bus (addresses 0 to 31)", not the PHY
// the driver manages. On a bus shared by two PHYs (the EVK's) GET
// /debug/regs for ENET1 shows ENET2's PHY (address 1) while ENET1's link
// is run from address 2: a developer reading the dump for ENET1's link
// problem reads another port's link. Linux dumps (phytool, ethtool) the
// PHY attached to the interface (phydev->mdio.addr). A defect.
func TestReviewDebugRegsDumpsTheDriversPHY(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Regs = twinPHY{c.Regs} }})
	p, err := r.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	groups := (&NICControls{NIC: r.NIC}).Registers()
	if len(groups) < 2 || groups[1].Block != "phy@2" {
		var blocks []string
		for _, g := range groups {
			blocks = append(blocks, g.Block)
		}
		t.Fatalf("dump blocks %v: the driver's PHY is at address %d", blocks, p.Addr)
	}
}
