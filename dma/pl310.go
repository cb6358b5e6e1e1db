package dma

import (
	"fmt"

	"github.com/tamanic/tamanic/internal/mmio"
)

// PL310 register offsets (ARM CoreLink Level 2 Cache Controller L2C-310 TRM,
// r3p3, §3.3 "Register summary"; i.MX6Q maps it at 0x00A02000).
const (
	PL310_CACHE_SYNC        = 0x730
	PL310_INV_LINE_PA       = 0x770
	PL310_CLEAN_LINE_PA     = 0x7B0
	PL310_CLEAN_INV_LINE_PA = 0x7F0
)

// PL310Line is the PL310's line size.
const PL310Line = 32

// PL310 maintains the outer (L2) cache of Cortex-A9 SoCs such as i.MX6Q by
// physical address. i.MX6UL/ULL and i.MX7D (Cortex-A7) have an integrated L2
// and need none.
type PL310 struct {
	Regs mmio.Regs
	// SyncPolls bounds the wait for CACHE_SYNC to complete.
	SyncPolls int
}

func (p *PL310) lineOp(reg uint32, pa uintptr, n int) {
	start := pa &^ (PL310Line - 1)
	for a := start; a < pa+uintptr(n); a += PL310Line {
		p.Regs.Write32(reg, uint32(a))
	}
}

// Clean writes back dirty L2 lines covering [pa, pa+n).
func (p *PL310) Clean(pa uintptr, n int) { p.lineOp(PL310_CLEAN_LINE_PA, pa, n) }

// Invalidate discards L2 lines covering [pa, pa+n); partial lines at either
// end are cleaned and invalidated so neighbouring bytes survive.
func (p *PL310) Invalidate(pa uintptr, n int) {
	end := pa + uintptr(n)
	if pa&(PL310Line-1) != 0 {
		p.Regs.Write32(PL310_CLEAN_INV_LINE_PA, uint32(pa&^(PL310Line-1)))
		pa = (pa + PL310Line) &^ (PL310Line - 1)
	}
	if end&(PL310Line-1) != 0 && end > pa {
		end &^= PL310Line - 1
		p.Regs.Write32(PL310_CLEAN_INV_LINE_PA, uint32(end))
	}
	for a := pa; a < end; a += PL310Line {
		p.Regs.Write32(PL310_INV_LINE_PA, uint32(a))
	}
}

// CleanInvalidate writes back and discards L2 lines covering [pa, pa+n).
func (p *PL310) CleanInvalidate(pa uintptr, n int) { p.lineOp(PL310_CLEAN_INV_LINE_PA, pa, n) }

// Sync drains the PL310 buffers; it returns an error if CACHE_SYNC does not
// complete within SyncPolls reads.
func (p *PL310) Sync() error {
	p.Regs.Write32(PL310_CACHE_SYNC, 0)
	polls := p.SyncPolls
	if polls <= 0 {
		polls = 1 << 16
	}
	for i := 0; i < polls; i++ {
		if p.Regs.Read32(PL310_CACHE_SYNC)&1 == 0 {
			return nil
		}
	}
	return fmt.Errorf("dma: PL310 cache sync did not complete after %d polls", polls)
}
