package netstack

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestAlignedViewPlacesFramesAtIPAlign checks that a received frame is
// copied whole into a view whose first byte lies rxAlign bytes past a word
// boundary (so its IP header, 14 bytes on, is word aligned, as the ENET's
// SHIFT16 buffers are), for every frame length the MAC hands up.
func TestAlignedViewPlacesFramesAtIPAlign(t *testing.T) {
	src := make([]byte, 2+1522)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	for _, n := range []int{14, 60, 64, 66, 127, 128, 1514, 1518, 1522} {
		b := src[2 : 2+n]
		v := alignedView(b)
		got := v.AsSlice()
		if !bytes.Equal(got, b) {
			t.Fatalf("%d-byte frame: view holds %d different bytes", n, len(got))
		}
		if a := (uintptr(unsafe.Pointer(&got[0])) + 14) & 3; a != 0 {
			t.Errorf("%d-byte frame: its IP header starts %d bytes past a word", n, a)
		}
		v.Release()
	}
}
