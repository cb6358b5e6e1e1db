package e1000etest

import (
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
)

// desc returns the four words of the descriptor at a, read in place from
// coherent memory (nil and a violation if unreachable or bus mastering
// is off).
func (m *Model) desc(a dma.Addr) []uint32 {
	if m.fn.Command()&4 == 0 {
		m.violate("descriptor access at %#x with bus mastering disabled", a)
		return nil
	}
	if m.opts.Mem == nil {
		m.violate("no DMA memory model for descriptors")
		return nil
	}
	b, err := m.opts.Mem.Coherent(a, 16)
	if err != nil {
		m.violate("descriptor at %#x: %v", a, err)
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), 4)
}

func load(w *uint32) uint32 { return atomic.LoadUint32(w) }

func store(w *uint32, v uint32) { atomic.StoreUint32(w, v) }

func (m *Model) dmaRead(a dma.Addr, p []byte, what string) bool {
	if err := m.fn.DMARead(a, p); err != nil {
		m.violate("DMA read of %s at %#x (%d bytes): %v", what, a, len(p), err)
		return false
	}
	return true
}

func (m *Model) dmaWrite(a dma.Addr, p []byte, what string) bool {
	if err := m.fn.DMAWrite(a, p); err != nil {
		m.violate("DMA write of %s at %#x (%d bytes): %v", what, a, len(p), err)
		return false
	}
	return true
}
