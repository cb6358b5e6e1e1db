//go:build !arm

package fec

import "sync/atomic"

// storeWord writes v to *p with one 32-bit access. Off ARM (host tests
// against the device model, which reads descriptors from another
// goroutine) it is an atomic store, so the race detector sees the
// hand-over.
func storeWord(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
