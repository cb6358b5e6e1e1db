package sabrelite

import "github.com/tamanic/tamanic/internal/mmio"

// The Cortex-A9 MPCore's interrupt controller lives in the SCU's private
// region, not at the Cortex-A7 offsets TamaGo's arm/gic assumes (+0x1000
// distributor, +0x2000 CPU interface): here the CPU interface is at
// PERIPHBASE+0x100 and the distributor at PERIPHBASE+0x1000 (Cortex-A9
// MPCore TRM r4p1, 1.5 "Private memory region", table 1-3).
const (
	GICC_OFF = 0x0100
	GICD_OFF = 0x1000

	// Distributor (ARM GIC architecture v1/v2, 4.3).
	GICD_CTLR        = 0x000
	GICD_TYPER       = 0x004
	GICD_ISENABLER   = 0x100
	GICD_ICENABLER   = 0x180
	GICD_ICPENDR     = 0x280
	GICD_IPRIORITYR  = 0x400
	GICD_ITARGETSR   = 0x800
	GICD_CTLR_ENABLE = 1

	// CPU interface (4.4).
	GICC_CTLR        = 0x00
	GICC_PMR         = 0x04
	GICC_IAR         = 0x0C
	GICC_EOIR        = 0x10
	GICC_CTLR_ENABLE = 1
)

// GIC is the A9 MPCore interrupt controller, used from core 0 in the
// secure world (every interrupt in group 0).
type GIC struct {
	Dist, CPU mmio.Regs
}

// Init disables and clears every interrupt, lets all priorities through
// and enables the distributor and this core's interface.
func (g *GIC) Init() {
	lines := int(g.Dist.Read32(GICD_TYPER)&0x1F) + 1
	for n := 0; n < lines; n++ {
		g.Dist.Write32(GICD_ICENABLER+uint32(4*n), 0xFFFFFFFF)
		g.Dist.Write32(GICD_ICPENDR+uint32(4*n), 0xFFFFFFFF)
	}
	g.CPU.Write32(GICC_PMR, 0xF0)
	g.CPU.Write32(GICC_CTLR, GICC_CTLR_ENABLE)
	g.Dist.Write32(GICD_CTLR, GICD_CTLR_ENABLE)
}

// Enable forwards interrupt id to core 0 at the highest priority.
func (g *GIC) Enable(id int) {
	if id >= 32 {
		// Shared peripheral interrupts go to no core until targeted.
		off := GICD_ITARGETSR + uint32(id&^3)
		sh := uint32(id&3) * 8
		g.Dist.Write32(off, g.Dist.Read32(off)&^(0xFF<<sh)|1<<sh)
	}
	off := GICD_IPRIORITYR + uint32(id&^3)
	sh := uint32(id&3) * 8
	g.Dist.Write32(off, g.Dist.Read32(off)&^(0xFF<<sh))
	g.Dist.Write32(GICD_ISENABLER+uint32(4*(id/32)), 1<<(id%32))
}

// Next acknowledges the highest-priority pending interrupt and returns its
// id, ending it at once (the handlers run after; the lines are level, so
// one still asserted is taken again); 1020 and above mean none.
func (g *GIC) Next() int {
	iar := g.CPU.Read32(GICC_IAR)
	id := int(iar & 0x3FF)
	if id < 1020 {
		g.CPU.Write32(GICC_EOIR, iar)
	}
	return id
}
