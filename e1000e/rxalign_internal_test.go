package e1000e

import (
	"testing"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// TestRxPostedRegionInsideSlot: every receive descriptor is posted RxAlign
// (2 mod 4) into its slot, and the whole RCTL.BSIZE buffer the controller
// may fill from that address lies in the slot's own cache lines: with
// every other slot left to the CPU, the device writing RxBufSize bytes at
// each posted address touches nothing it was not handed (dmatest reports
// CPUOwned otherwise, as it would with 2048-byte slots and the 2-byte
// offset).
func TestRxPostedRegionInsideSlot(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{CachedSize: 4 << 20, CoherentSize: 64 << 10})
	var r rxRing
	if err := r.alloc(mem, 16, 4); err != nil {
		t.Fatal(err)
	}
	for i := range r.pool {
		b := r.pool[i].buf
		if b.Addr()%dma.CacheLine != 0 || b.Len()%dma.CacheLine != 0 || b.Len() < RxAlign+RxBufSize {
			t.Fatalf("slot %d at %#x, %d bytes: not whole cache lines holding %d+%d bytes", i, b.Addr(), b.Len(), RxAlign, RxBufSize)
		}
		if i > 0 && r.pool[i-1].buf.Addr()+dma.Addr(r.pool[i-1].buf.Len()) > b.Addr() {
			t.Fatalf("slots %d and %d overlap", i-1, i)
		}
	}
	for i := 0; i < r.n; i += 2 {
		r.arm(mem, i)
	}
	full := make([]byte, RxBufSize)
	for i := range full {
		full[i] = byte(i)
	}
	for i := 0; i < r.n; i += 2 {
		a := dma.Addr(uint64(r.load(i, 0)) | uint64(r.load(i, 1))<<32)
		slot := r.bufs[i].buf
		if a%4 != 2 || a != slot.Addr()+RxAlign {
			t.Errorf("descriptor %d: buffer address %#x, slot at %#x: want the slot plus %d (2 mod 4)", i, a, slot.Addr(), RxAlign)
		}
		if end := a + RxBufSize; end > slot.Addr()+dma.Addr(slot.Len()) {
			t.Errorf("descriptor %d: RCTL.BSIZE buffer [%#x, %#x) ends past its slot [%#x, %#x)", i, a, end, slot.Addr(), slot.Addr()+dma.Addr(slot.Len()))
		}
		if err := mem.DeviceWrite(a, full); err != nil {
			t.Errorf("descriptor %d: device write of %d bytes at %#x: %v", i, len(full), a, err)
		}
	}
	for _, v := range mem.Take() {
		t.Errorf("a full RCTL.BSIZE buffer written at the posted address: %v", v)
	}
	// What the device wrote is what the frame's bytes show.
	for i := 0; i < r.n; i += 2 {
		slot := r.bufs[i].buf
		mem.SyncForCPU(&slot, 0, slot.Len(), dma.FromDevice)
		if got := slot.Bytes()[RxAlign : RxAlign+RxBufSize]; string(got) != string(full) {
			t.Fatalf("descriptor %d: buffer bytes differ from those written", i)
		}
	}
}
