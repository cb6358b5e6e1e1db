package connectx_test

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestReceiveAlignedWithinBuffer: every received frame is handed up from
// its first byte at an address 2 mod 4 (RxAlign, so the IP header is
// 4-byte aligned as with the ENET's SHIFT16), and the data segment's
// byte_count describes only the buffer after RxAlign: a frame filling it
// to the last byte is received whole, one byte more is refused by the card
// (length error CQE) without a byte written past the buffer, whose
// neighbour is lent to the stack and owned by the CPU (dmatest reports
// CPUOwned for any write there).
func TestReceiveAlignedWithinBuffer(t *testing.T) {
	const bufSize = 2048
	r := connectxtest.NewRig(t, connectxtest.RigOptions{MAC: [6]byte{2, 0xC7, 0, 0, 0, 2},
		Config: func(c *connectx.Config) { c.RxRing = 16; c.RxBufSize = bufSize }})
	frame := func(n int, seed byte) []byte {
		p := make([]byte, n-42)
		for i := range p {
			p[i] = seed + byte(i*7)
		}
		return udp4(p, true)
	}
	// Every buffer in the ring once, at the largest frame the vport MTU
	// (1500) lets through; all held, so each is the CPU's.
	var held []interface{ Release() error }
	for i := 0; i < 16; i++ {
		f := frame(1514, byte(i))
		if !r.Model.Deliver(f) {
			t.Fatalf("frame %d not delivered", i)
		}
		fr, err := r.NIC.Receive()
		if err != nil || fr == nil {
			t.Fatalf("frame %d: %v %v", i, fr, err)
		}
		b := fr.Bytes()
		if !bytes.Equal(b, f) {
			t.Fatalf("frame %d: received %d bytes, not the %d delivered", i, len(b), len(f))
		}
		if a := uintptr(unsafe.Pointer(&b[0])); a%4 != 2 {
			t.Errorf("frame %d at %#x: not 2 mod 4, so its IP header is not 4-byte aligned", i, a)
		}
		held = append(held, fr)
	}
	// The first buffer goes back to the card; its neighbour stays lent.
	if err := held[0].Release(); err != nil {
		t.Fatal(err)
	}
	full := frame(bufSize-connectx.RxAlign, 0x55)
	if !r.Model.Deliver(full) {
		t.Fatalf("a %d-byte frame, filling the buffer after RxAlign, not delivered", len(full))
	}
	fr, err := r.NIC.Receive()
	if err != nil || fr == nil {
		t.Fatalf("full buffer: %v %v", fr, err)
	}
	if b := fr.Bytes(); !bytes.Equal(b, full) || uintptr(unsafe.Pointer(&b[0]))%4 != 2 {
		t.Fatalf("full buffer: %d bytes at %p", len(b), &b[0])
	}
	if err := fr.Release(); err != nil {
		t.Fatal(err)
	}
	over := frame(bufSize-connectx.RxAlign+1, 0xAA)
	if r.Model.Deliver(over) {
		t.Fatalf("a %d-byte frame was stored in a %d-byte data segment", len(over), bufSize-connectx.RxAlign)
	}
	if fr, err := r.NIC.Receive(); fr != nil || !errors.Is(err, connectx.ErrRxError) {
		t.Fatalf("oversized frame: %v %v, want a length error", fr, err)
	}
	for _, f := range held[1:] {
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.NIC.Stats(); st.RxPackets != 17 || st.RxErrors != 1 {
		t.Errorf("driver statistics %+v", st)
	}
}
