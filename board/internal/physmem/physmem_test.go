package physmem

import (
	"testing"
	"unsafe"
)

func TestRegionIsTheAddress(t *testing.T) {
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = byte(i)
	}
	r := Region(uintptr(unsafe.Pointer(&buf[8])), 16)
	if len(r) != 16 || &r[0] != &buf[8] || r[15] != 23 {
		t.Fatalf("Region = %p len %d, want %p len 16", &r[0], len(r), &buf[8])
	}
}
