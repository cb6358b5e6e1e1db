package dma

import "unsafe"

// Misalignment returns how far p's first byte lies past the previous multiple
// of align (a power of two, at most 4096): 0 when p starts aligned. Device
// addresses keep the low 12 bits of CPU addresses, so this is the device-side
// misalignment too. An empty p is aligned.
func Misalignment(p []byte, align int) int {
	if len(p) == 0 || align <= 1 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(p))) & uintptr(align-1))
}

// cpuAddr returns the address of p's first byte as a number.
func cpuAddr(p []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))
}
