package dma

// InnerCache is a core's own data cache maintenance by address range
// [start, end), each line's operation reaching the next level (the PL310
// when there is one). On ARM it is the by-MVA CP15 operations of
// ARMv7Cache; dma/dmatest models it with an outer cache behind it.
type InnerCache interface {
	Clean(start, end uintptr)
	Invalidate(start, end uintptr)
	CleanInvalidate(start, end uintptr)
	// Barrier is DSB: earlier maintenance has completed.
	Barrier()
}

// InnerLine is the granule TwoLevel rounds partial lines to: the
// Cortex-A9's 32-byte line, which divides the Cortex-A7's 64 bytes.
// (ARMv7Cache's loops step by the core's own line size, read from CTR.)
const InnerLine = 32

// TwoLevel is CacheOps for an inner cache with an optional PL310 outer
// cache (Cortex-A9 SoCs such as the i.MX6Q); ARMv7Cache runs it. The order
// is what a write-back hierarchy needs with lines that may move between
// levels at any moment (Linux arch/arm/mm/dma-mapping.c does the same per
// direction):
//
//   - Clean: inner, then outer, then CACHE_SYNC. Outer first would write
//     back nothing and leave the inner dirty data in the outer cache.
//   - Invalidate: inner, outer, then inner again. Discarding inner lines
//     first means none can be evicted dirty into the outer cache while it
//     is invalidated (which would later be written over what the device
//     wrote); the second inner pass drops lines refilled from stale outer
//     lines meanwhile (speculative fetches). Lines only partly in the
//     range are cleaned and invalidated instead, at both levels, so the
//     bytes outside it survive.
//   - CleanInvalidate: inner, then outer.
//
// Outer operations end with CACHE_SYNC; the caller's Barrier completes
// the inner ones.
type TwoLevel struct {
	Inner InnerCache
	Outer *PL310
}

// Clean implements CacheOps.
func (c TwoLevel) Clean(start uintptr, n int) {
	c.Inner.Clean(start, start+uintptr(n))
	if c.Outer != nil {
		c.Inner.Barrier()
		c.Outer.Clean(start, n)
		_ = c.Outer.Sync()
	}
}

// Invalidate implements CacheOps.
func (c TwoLevel) Invalidate(start uintptr, n int) {
	c.innerInvalidate(start, n)
	if c.Outer != nil {
		c.Inner.Barrier()
		c.Outer.Invalidate(start, n)
		_ = c.Outer.Sync()
		c.innerInvalidate(start, n)
	}
}

// innerInvalidate invalidates the inner lines of [start, start+n),
// cleaning partial lines at either end first.
func (c TwoLevel) innerInvalidate(start uintptr, n int) {
	end := start + uintptr(n)
	if start&(InnerLine-1) != 0 {
		c.Inner.CleanInvalidate(start, start+1)
		start = (start + InnerLine) &^ (InnerLine - 1)
	}
	if end&(InnerLine-1) != 0 && end > start {
		c.Inner.CleanInvalidate(end-1, end)
		end &^= InnerLine - 1
	}
	if end > start {
		c.Inner.Invalidate(start, end)
	}
}

// CleanInvalidate implements CacheOps.
func (c TwoLevel) CleanInvalidate(start uintptr, n int) {
	c.Inner.CleanInvalidate(start, start+uintptr(n))
	if c.Outer != nil {
		c.Inner.Barrier()
		c.Outer.CleanInvalidate(start, n)
		_ = c.Outer.Sync()
	}
}

// Barrier implements CacheOps.
func (c TwoLevel) Barrier() { c.Inner.Barrier() }
