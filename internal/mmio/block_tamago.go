//go:build tamago

package mmio

import (
	"sync/atomic"
	"unsafe"
)

// Block is a register block at a fixed physical address. TamaGo maps
// peripherals 1:1 as strongly ordered device memory, so an atomic 32-bit load
// or store is one bus access in program order.
type Block struct {
	Base uintptr
}

// Read32 loads the register at Base+off.
func (b Block) Read32(off uint32) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(b.Base + uintptr(off))))
}

// Write32 stores v into the register at Base+off.
func (b Block) Write32(off, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(b.Base+uintptr(off))), v)
}
