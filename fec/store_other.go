//go:build !arm

package fec

import "sync/atomic"

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
