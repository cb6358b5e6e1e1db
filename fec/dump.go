package fec

import "fmt"

// Register is one register's value, named as in the reference manual.
type Register struct {
	Name   string `json:"name"`
	Offset uint32 `json:"offset"`
	Value  uint32 `json:"value"`
}

// dumpRegs are the ENET registers Registers reads: Linux's
// fec_enet_register_offset_6ul list (fec_main.c, for `ethtool -d`) with
// the manual's names (IMX6ULLRM 22.5), plus the multi-queue registers on
// the parts that have them. None has a side effect on read.
var dumpRegs = []struct {
	name string
	off  uint32
}{
	{"EIR", ENETx_EIR}, {"EIMR", ENETx_EIMR}, {"RDAR", ENETx_RDAR}, {"TDAR", ENETx_TDAR},
	{"ECR", ENETx_ECR}, {"MMFR", ENETx_MMFR}, {"MSCR", ENETx_MSCR}, {"MIBC", ENETx_MIBC},
	{"RCR", ENETx_RCR}, {"TCR", ENETx_TCR}, {"PALR", ENETx_PALR}, {"PAUR", ENETx_PAUR},
	{"OPD", ENETx_OPD}, {"TXIC0", ENETx_TXIC0}, {"RXIC0", ENETx_RXIC0},
	{"IAUR", ENETx_IAUR}, {"IALR", ENETx_IALR}, {"GAUR", ENETx_GAUR}, {"GALR", ENETx_GALR},
	{"TFWR", ENETx_TFWR}, {"RDSR", ENETx_RDSR}, {"TDSR", ENETx_TDSR}, {"MRBR", ENETx_MRBR},
	{"RSFL", ENETx_RSFL}, {"RSEM", ENETx_RSEM}, {"RAEM", ENETx_RAEM}, {"RAFL", ENETx_RAFL},
	{"TSEM", ENETx_TSEM}, {"TAEM", ENETx_TAEM}, {"TAFL", ENETx_TAFL}, {"TIPG", ENETx_TIPG},
	{"FTRL", ENETx_FTRL}, {"TACC", ENETx_TACC}, {"RACC", ENETx_RACC},
}

// multiQueueRegs are read only on parts with three rings (i.MX6SX, 7D).
var multiQueueRegs = []struct {
	name string
	off  uint32
}{
	{"TXIC1", ENETx_TXIC1}, {"TXIC2", ENETx_TXIC2}, {"RXIC1", ENETx_RXIC1}, {"RXIC2", ENETx_RXIC2},
	{"RCMR1", ENETx_RCMR1}, {"RCMR2", ENETx_RCMR2}, {"DMA1CFG", ENETx_DMA1CFG}, {"DMA2CFG", ENETx_DMA2CFG},
	{"RDAR1", ENETx_RDAR1}, {"TDAR1", ENETx_TDAR1}, {"RDAR2", ENETx_RDAR2}, {"TDAR2", ENETx_TDAR2},
	{"QOS", ENETx_QOS},
}

// Registers reads the ENET registers a developer asks for first (as
// `ethtool -d` does on Linux), for the firmware's GET /debug/regs.
func (n *NIC) Registers() []Register {
	out := make([]Register, 0, len(dumpRegs)+len(multiQueueRegs))
	for _, r := range dumpRegs {
		out = append(out, Register{r.name, r.off, n.regs.Read32(r.off)})
	}
	if n.cfg.Caps.Has(QuirkMultiQueue) {
		for _, r := range multiQueueRegs {
			out = append(out, Register{r.name, r.off, n.regs.Read32(r.off)})
		}
	}
	return out
}

// phyRegs are the IEEE 802.3 clause 22 registers (22.2.4) read from the
// PHY: control, identifiers, autonegotiation advertisement and link
// partner ability, 1000BASE-T control and extended status. Not BMSR
// (its link status latches low until read, 22.2.4.2.13, and the link
// poll needs that latch to see a flap: a review found a dump between a
// flap and the poll leaving the MAC at the old speed), ANER (its parallel
// detection fault latches high) nor GBSR (its idle error count clears on
// read): no read here changes what the driver reads.
var phyRegs = []struct {
	name string
	reg  int
}{
	{"BMCR", 0}, {"PHYIDR1", 2}, {"PHYIDR2", 3}, {"ANAR", 4}, {"ANLPAR", 5},
	{"ANNPTR", 7}, {"ANLPRNPR", 8}, {"GBCR", 9}, {"GBESR", 15},
}

// PHYAddr returns the address of the PHY the driver found last (FindPHY,
// which StartLink and the boards use), or -1.
func (n *NIC) PHYAddr() int {
	if !n.phyTaken.Load() {
		return -1
	}
	return int(n.phyAddr.Load())
}

// PHYRegisters reads the clause 22 registers of the PHY at address pa
// over MDIO; Offset is the register number.
func (n *NIC) PHYRegisters(pa int) ([]Register, error) {
	out := make([]Register, 0, len(phyRegs))
	for _, r := range phyRegs {
		v, err := n.MDIORead(pa, r.reg)
		if err != nil {
			return out, fmt.Errorf("fec: PHY %d register %s: %w", pa, r.name, err)
		}
		out = append(out, Register{r.name, uint32(r.reg), uint32(v)})
	}
	return out, nil
}
