//go:build arm

package dma

// l1Only reports whether c is the core's own data cache with no outer cache
// (ARMv7Cache without a PL310: the Cortex-A7 of the i.MX6UL/ULL and
// i.MX7D). System then calls the maintenance routines directly: through
// the CacheOps interface each sync cost two dynamic calls and the value
// receiver's wrappers, about as much as cleaning a header's line.
func l1Only(c CacheOps) bool {
	a, ok := c.(ARMv7Cache)
	return ok && a.Outer == nil
}

// l1Sync is ARMv7Cache.Clean, Invalidate or CleanInvalidate for dir, then
// its Barrier, for a core without an outer cache.
func l1Sync(start uintptr, n int, dir Dir) {
	switch dir {
	case ToDevice:
		dcacheClean(start, start+uintptr(n))
	case FromDevice:
		dcacheInvalidateRange(start, start+uintptr(n))
	default:
		dcacheCleanInvalidate(start, start+uintptr(n))
	}
	dsb()
}

// l1Barrier is ARMv7Cache.Barrier.
func l1Barrier() { dsb() }
