//go:build arm

package dma

// Implemented in cache_arm.s. Each walks [start, end) in 32-byte steps (the
// Cortex-A9 line; the Cortex-A7's 64-byte line is simply visited twice) with
// the ARMv7 by-MVA operations to the point of coherency (ARM Architecture
// Reference Manual ARMv7-A/R, B4.2.1 "Cache and branch predictor maintenance
// operations", VMSA): DCCMVAC (c7,c10,1), DCIMVAC (c7,c6,1), DCCIMVAC
// (c7,c14,1), then DSB.
func dcacheClean(start, end uintptr)
func dcacheInvalidate(start, end uintptr)
func dcacheCleanInvalidate(start, end uintptr)
func dsb()

const armLine = 32

// ARMv7Cache is CacheOps for Cortex-A7 (i.MX6UL/ULL, i.MX7D) and Cortex-A9
// (i.MX6Q/DL) cores. Outer, when set, is the PL310 of Cortex-A9 SoCs; TamaGo
// maps RAM 1:1 so CPU addresses are physical addresses. Clean goes inner then
// outer; invalidate goes outer then inner, so no inner line is refilled from
// a stale outer line.
type ARMv7Cache struct {
	Outer *PL310
}

// Clean implements CacheOps.
func (c ARMv7Cache) Clean(start uintptr, n int) {
	dcacheClean(start, start+uintptr(n))
	if c.Outer != nil {
		c.Outer.Clean(start, n)
		_ = c.Outer.Sync()
	}
}

// Invalidate implements CacheOps.
func (c ARMv7Cache) Invalidate(start uintptr, n int) {
	end := start + uintptr(n)
	if c.Outer != nil {
		c.Outer.Invalidate(start, n)
		_ = c.Outer.Sync()
	}
	// Partial lines hold bytes that are not ours: write them back first.
	if start&(armLine-1) != 0 {
		dcacheCleanInvalidate(start, start+1)
		start = (start + armLine) &^ (armLine - 1)
	}
	if end&(armLine-1) != 0 && end > start {
		dcacheCleanInvalidate(end-1, end)
		end &^= armLine - 1
	}
	if end > start {
		dcacheInvalidate(start, end)
	}
}

// CleanInvalidate implements CacheOps.
func (c ARMv7Cache) CleanInvalidate(start uintptr, n int) {
	dcacheCleanInvalidate(start, start+uintptr(n))
	if c.Outer != nil {
		c.Outer.CleanInvalidate(start, n)
		_ = c.Outer.Sync()
	}
}

// Barrier implements CacheOps.
func (ARMv7Cache) Barrier() { dsb() }
