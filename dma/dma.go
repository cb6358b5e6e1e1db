// Package dma describes memory that a bus master (a NIC's uDMA) reads and
// writes, and the cache maintenance that makes sharing it with a CPU with a
// non-coherent data cache correct.
//
// The model follows the Linux streaming DMA API. A Buffer pairs the CPU's view
// of memory with the address the device uses; the two are never assumed equal.
// Ownership moves explicitly:
//
//   - SyncForDevice (or Map) hands memory to the device. For ToDevice it cleans
//     the data cache so the device reads what the CPU wrote; for FromDevice it
//     invalidates so no dirty line is later written back over DMA data.
//   - SyncForCPU (or Unmap) takes it back. For FromDevice it invalidates so the
//     CPU reads what the device wrote, not stale cache lines.
//
// Coherent allocations (descriptor rings) are mapped uncached and need no
// maintenance, only Barrier between filling a descriptor and publishing it.
//
// Two implementations exist: System, for real machines (ARMv7 cache
// maintenance by address range, with an optional PL310 outer cache), and
// dmatest.Memory, a host model of a non-coherent cache that reports every
// protocol violation a real cache would turn into silent corruption.
//
// Device addresses of the same memory keep its low 12 bits (both
// implementations guarantee it), so alignment may be judged on the CPU
// pointer: see Misalignment.
package dma

import (
	"errors"
	"fmt"
)

// Addr is a bus address as a DMA master sees it.
type Addr uint64

// Dir says which way data moves between CPU and device.
type Dir uint8

// Directions, as in the Linux DMA API.
const (
	ToDevice      Dir = 1 << iota // the device reads what the CPU wrote
	FromDevice                    // the CPU reads what the device wrote
	Bidirectional = ToDevice | FromDevice
)

func (d Dir) String() string {
	switch d {
	case ToDevice:
		return "to-device"
	case FromDevice:
		return "from-device"
	case Bidirectional:
		return "bidirectional"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}

// Attr selects the memory type of an allocation.
type Attr uint8

const (
	// Cached memory is fast for the CPU and needs explicit cache maintenance
	// around every transfer (packet buffers).
	Cached Attr = iota
	// Coherent memory is mapped uncached: CPU stores reach memory in program
	// order once a Barrier is issued (descriptor rings).
	Coherent
)

// CacheLine is the maintenance granule the project plans for: the Cortex-A7
// L1 data cache line (64 bytes); the Cortex-A9 (32 bytes) and the PL310 (32
// bytes) divide it. Buffers the device writes must not share a line with
// anything else.
const CacheLine = 64

// Buffer is DMA-reachable memory: the CPU's view and the device's address of
// the same bytes. The zero Buffer is invalid. Slice narrows one without
// allocating. Its methods take a pointer: a Buffer is six words on 32-bit
// ARM, too big for registers, and every copy of one (a value receiver
// included) is a runtime.duffcopy call.
type Buffer struct {
	cpu  []byte
	addr Addr
	tag  uint32 // owner-private handle (allocation or mapping), never 0 when valid
}

// MakeBuffer is for Memory implementations: it builds a Buffer from its parts.
func MakeBuffer(cpu []byte, addr Addr, tag uint32) Buffer {
	return Buffer{cpu: cpu, addr: addr, tag: tag}
}

// Bytes returns the CPU view.
func (b *Buffer) Bytes() []byte { return b.cpu }

// Addr returns the device address of the first byte.
func (b *Buffer) Addr() Addr { return b.addr }

// Len returns the length in bytes.
func (b *Buffer) Len() int { return len(b.cpu) }

// Tag returns the implementation's handle for the allocation or mapping.
func (b *Buffer) Tag() uint32 { return b.tag }

// Valid reports whether b came from a Memory.
func (b *Buffer) Valid() bool { return b.tag != 0 }

// Slice returns the n bytes at off. It panics if they are out of range, as a
// slice expression would.
func (b *Buffer) Slice(off, n int) Buffer {
	return Buffer{cpu: b.cpu[off : off+n : off+n], addr: b.addr + Addr(off), tag: b.tag}
}

// Memory is everything a driver needs of DMA memory.
//
// The per-frame methods (Map, Unmap and the syncs) take the Buffer by
// pointer: a Buffer is six words on 32-bit ARM, and passing one by value
// through an interface copies it with a runtime.duffcopy call every time.
// The pointer must point at memory that outlives the call anyway (a field
// of the driver's ring state): the address of a local Buffer escapes to the
// heap through the interface call. Implementations do not keep the pointer.
type Memory interface {
	// Alloc reserves size bytes aligned to align (a power of two, at least
	// CacheLine for Cached memory). Cached allocations start owned by the
	// CPU.
	Alloc(size, align int, attr Attr) (Buffer, error)
	// Free returns an allocation. The device must not own any of it.
	Free(b Buffer) error
	// Map hands memory that did not come from Alloc (a packet payload on the
	// heap) to the device for dir, including SyncForDevice, and sets *b to
	// the Buffer the device uses (to the zero Buffer on error). It must not
	// allocate in steady state.
	Map(b *Buffer, p []byte, dir Dir) error
	// Unmap ends the mapping *b made by Map, including SyncForCPU for dir.
	Unmap(b *Buffer, dir Dir) error
	// SyncForDevice hands the n bytes at offset off of *b (an allocation, a
	// mapping, or part of one) to the device, as Linux's
	// dma_sync_single_range_for_device. A range outside *b is a bug of the
	// caller, as an out-of-range slice expression is.
	SyncForDevice(b *Buffer, off, n int, dir Dir)
	// SyncForCPU takes the n bytes at offset off of *b back from the
	// device.
	SyncForCPU(b *Buffer, off, n int, dir Dir)
	// Barrier completes all earlier CPU stores to memory before any later
	// store, register writes included (ARM: DSB).
	Barrier()
}

// Errors returned by Memory implementations.
var (
	ErrNoMemory   = errors.New("dma: region exhausted")
	ErrBadAlign   = errors.New("dma: alignment must be a power of two")
	ErrNotMapped  = errors.New("dma: buffer is not an allocation or mapping of this memory")
	ErrUnreadable = errors.New("dma: memory is not reachable by the device")
)

// AlignUp rounds n up to a multiple of align (a power of two).
func AlignUp(n, align int) int { return (n + align - 1) &^ (align - 1) }

// LineSpan returns the offset and length of b rounded out to whole cache
// lines of its device address: the bytes a maintenance operation on b really
// touches.
func LineSpan(a Addr, n int) (start Addr, length int) {
	start = a &^ (CacheLine - 1)
	end := (a + Addr(n) + CacheLine - 1) &^ (CacheLine - 1)
	return start, int(end - start)
}
