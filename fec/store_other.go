//go:build !arm

package fec

import (
	"sync/atomic"
	"unsafe"
)

// storeWord writes v to *p with one 32-bit access. Off ARM (host tests
// against the device model, which reads descriptors from another
// goroutine) it is an atomic store, so the race detector sees the
// hand-over.
func storeWord(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// loadWord reads *p with one 32-bit access: off ARM an atomic load, so the
// race detector sees the hand-over from the device model.
func loadWord(p *uint32) uint32 { return atomic.LoadUint32(p) }

// rmb orders descriptor reads; off ARM the atomic loads already do.
func rmb() {}

// storeExt writes an enhanced descriptor's words other than the status
// word: addr at dwAddr, ext0 at dwExt0, zero at dwExt1 and dwExt2.
func storeExt(d unsafe.Pointer, addr, ext0 uint32) {
	storeWord(descWord(d, dwAddr), addr)
	storeWord(descWord(d, dwExt0), ext0)
	storeWord(descWord(d, dwExt1), 0)
	storeWord(descWord(d, dwExt2), 0)
}

// loadExt reads dwExt2, then dwExt0 and dwExt1, each with one access.
func loadExt(d unsafe.Pointer) (e2, e0, e1 uint32) {
	e2 = loadWord(descWord(d, dwExt2))
	rmb()
	return e2, loadWord(descWord(d, dwExt0)), loadWord(descWord(d, dwExt1))
}
