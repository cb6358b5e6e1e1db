package e1000e_test

import (
	"bytes"
	"testing"

	"github.com/tamanic/tamanic/e1000e"
)

// FuzzRxWriteback feeds the driver arbitrary RX write-back status words
// and lengths: it must return a frame no longer than the buffer, or a
// counted error, never panic, and keep receiving afterwards.
func FuzzRxWriteback(f *testing.F) {
	f.Add(uint32(3), uint16(60))
	f.Add(uint32(1), uint16(60))
	f.Add(uint32(3), uint16(4000))
	f.Add(uint32(0xFFFFFFFF), uint16(0))
	f.Add(uint32(3|1<<30|1<<29|1<<6|1<<5), uint16(13))
	f.Fuzz(func(t *testing.T, status uint32, length uint16) {
		r := newRig(t, rigOptions{noTrace: true, cfg: func(c *e1000e.Config) { c.RxRing = 8; c.RxSpare = 4 }})
		frame := make([]byte, 100)
		copy(frame, []byte{0x52, 0x54, 0, 0x12, 0x34, 1})
		if !r.model.InjectWriteback(frame, status|1, length) {
			t.Fatal("not stored")
		}
		fr, err := r.nic.Receive()
		switch {
		case fr != nil && err != nil:
			t.Fatalf("frame and error: %v", err)
		case fr != nil:
			if n := len(fr.Bytes()); n != int(length) || n > e1000e.RxBufSize || n < 14 {
				t.Fatalf("frame of %d bytes for length %d", n, length)
			}
			fr.Release()
		case err == nil:
			t.Fatal("DD set but neither frame nor error")
		}
		if !r.model.Inject(frame) {
			t.Fatal("second frame not stored")
		}
		fr, err = r.nic.Receive()
		if err != nil || fr == nil || !bytes.Equal(fr.Bytes(), frame) {
			t.Fatalf("receiving after a bad write-back: %v %v", fr, err)
		}
		fr.Release()
	})
}
