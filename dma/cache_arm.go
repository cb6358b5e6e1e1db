//go:build arm

package dma

// Implemented in cache_arm.s. Each walks [start, end) one data cache line
// at a time, the line size read from CTR (64 bytes on the Cortex-A7, 32 on
// the Cortex-A9), with the ARMv7 by-MVA operations to the point of
// coherency (ARM Architecture Reference Manual ARMv7-A/R, B4.2.1 "Cache and
// branch predictor maintenance operations", VMSA): DCCMVAC (c7,c10,1),
// DCIMVAC (c7,c6,1), DCCIMVAC (c7,c14,1). None ends with DSB: the caller's
// Barrier completes them (System issues one after every sync).
func dcacheClean(start, end uintptr)
func dcacheInvalidate(start, end uintptr)
func dcacheCleanInvalidate(start, end uintptr)

// dcacheInvalidateRange invalidates [start, end), cleaning and
// invalidating the lines only partly inside it, by the line size from CTR.
func dcacheInvalidateRange(start, end uintptr)
func dsb()

// TranslationBarrier completes a change to the translation tables that
// ended with a TLB invalidate, such as TamaGo's arm.CPU.ConfigureMMU
// (whose flush_tlb issues TLBIALL with no barrier after it): DSB SY waits
// for the invalidate to complete, ISB SY makes the instructions after it
// translate with the new entries (ARM ARM ARMv7-A/R B3.10.1 "General TLB
// maintenance requirements"; Linux local_flush_tlb_all ends the same way).
func TranslationBarrier()

// armInner is the core's own cache maintenance.
type armInner struct{}

func (armInner) Clean(start, end uintptr)           { dcacheClean(start, end) }
func (armInner) Invalidate(start, end uintptr)      { dcacheInvalidate(start, end) }
func (armInner) CleanInvalidate(start, end uintptr) { dcacheCleanInvalidate(start, end) }
func (armInner) Barrier()                           { dsb() }

// ARMv7Cache is CacheOps for Cortex-A7 (i.MX6UL/ULL, i.MX7D) and Cortex-A9
// (i.MX6Q/DL) cores. Outer, when set, is the PL310 of Cortex-A9 SoCs; TamaGo
// maps RAM 1:1 so CPU addresses are physical addresses. The order of inner
// and outer operations is TwoLevel's (the same code, checked on the host
// against dma/dmatest's two-level cache model).
type ARMv7Cache struct {
	Outer *PL310
}

func (c ARMv7Cache) ops() TwoLevel { return TwoLevel{Inner: armInner{}, Outer: c.Outer} }

// Clean implements CacheOps. Without an outer cache (Cortex-A7) it is the
// inner loop alone, called directly: TwoLevel's interface call and the
// wrappers around it cost about as much as cleaning a header's line.
func (c ARMv7Cache) Clean(start uintptr, n int) {
	if c.Outer == nil {
		dcacheClean(start, start+uintptr(n))
		return
	}
	c.ops().Clean(start, n)
}

// Invalidate implements CacheOps. Without an outer cache it is one
// assembly routine, partial lines included, instead of TwoLevel's calls
// through the InnerCache interface (the RX path invalidates every frame
// it looks at).
func (c ARMv7Cache) Invalidate(start uintptr, n int) {
	if c.Outer == nil {
		dcacheInvalidateRange(start, start+uintptr(n))
		return
	}
	c.ops().Invalidate(start, n)
}

// CleanInvalidate implements CacheOps.
func (c ARMv7Cache) CleanInvalidate(start uintptr, n int) { c.ops().CleanInvalidate(start, n) }

// Barrier implements CacheOps.
func (ARMv7Cache) Barrier() { dsb() }
