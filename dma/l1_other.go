//go:build !arm

package dma

// l1Only is false off ARM: ARMv7Cache exists only there.
func l1Only(CacheOps) bool { return false }

// l1Sync is never called off ARM (l1Only is false).
func l1Sync(uintptr, int, Dir) { panic("dma: l1Sync off ARM") }

// l1Barrier is never called off ARM (l1Only is false).
func l1Barrier() { panic("dma: l1Barrier off ARM") }
