package dma

import (
	"fmt"
	"sync"
)

// CacheOps is data cache maintenance by CPU address range, to the point of
// coherency. Implementations round ranges out to whole lines; Invalidate
// cleans partial lines at either end first so bytes outside the range are
// never discarded.
type CacheOps interface {
	Clean(start uintptr, n int)
	Invalidate(start uintptr, n int)
	CleanInvalidate(start uintptr, n int)
	// Barrier waits for all earlier memory accesses and maintenance
	// operations to complete (ARM: DSB SY).
	Barrier()
}

// RegionConfig describes one contiguous block of memory reserved for DMA.
type RegionConfig struct {
	// Mem is the CPU view of the whole block.
	Mem []byte
	// Base is the device address of Mem[0].
	Base Addr
	// Uncached says the MMU maps this block uncached, so buffers allocated
	// from it need no cache maintenance (syncing them is a barrier only).
	// Set it for the Cached region only when that is true of the memory
	// map: memory mapped from RAM by Map is maintained regardless.
	Uncached bool
}

// SystemConfig describes the DMA view of a real machine.
type SystemConfig struct {
	// Cached holds packet buffers; Coherent holds descriptor rings and must
	// be mapped uncached by the MMU. Either may be empty.
	Cached, Coherent RegionConfig
	// RAMStart and RAMEnd bound the CPU addresses Map accepts (the Go heap
	// lives inside them). Device address = CPU address + BusOffset.
	RAMStart, RAMEnd uintptr
	BusOffset        Addr
	// Cache maintains the data cache; nil on a cache-coherent system.
	Cache CacheOps
}

// Buffer tags used by System.
const (
	tagCached   = 1
	tagCoherent = 2
	tagMapped   = 3
)

// System is the Memory of a real machine: allocations from reserved regions,
// mappings of any RAM at CPU address plus a bus offset, and cache
// maintenance through CacheOps. It is safe for concurrent use.
type System struct {
	cfg    SystemConfig
	mu     sync.Mutex
	cached *Arena
	coh    *Arena
	// l1 is set when cfg.Cache is the core's own cache with no outer one
	// (l1Only): the syncs then call the maintenance routines directly.
	l1 bool
}

// NewSystem returns a System for cfg.
func NewSystem(cfg SystemConfig) *System {
	return &System{cfg: cfg, cached: NewArena(len(cfg.Cached.Mem)), coh: NewArena(len(cfg.Coherent.Mem)),
		l1: cfg.Cache != nil && l1Only(cfg.Cache)}
}

// Alloc implements Memory.
func (s *System) Alloc(size, align int, attr Attr) (Buffer, error) {
	r, a, tag := s.region(attr)
	if attr == Cached && align < CacheLine {
		align = CacheLine
	}
	// Cached allocations are whole lines so no neighbour shares one.
	n := size
	if attr == Cached {
		n = AlignUp(size, CacheLine)
	}
	s.mu.Lock()
	off, err := a.Alloc(n, align)
	s.mu.Unlock()
	if err != nil {
		return Buffer{}, fmt.Errorf("dma: alloc %d bytes (%v): %w", size, attr, err)
	}
	// Region bases are at least page aligned, so offset alignment is address
	// alignment.
	return Buffer{cpu: r.Mem[off : off+size : off+size], addr: r.Base + Addr(off), tag: tag}, nil
}

// Free implements Memory.
func (s *System) Free(b Buffer) error {
	if b.tag != tagCached && b.tag != tagCoherent {
		return fmt.Errorf("dma: free: %w", ErrNotMapped)
	}
	r, a, _ := s.region(Cached)
	if b.tag == tagCoherent {
		r, a, _ = s.region(Coherent)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := a.Release(int(b.addr - r.Base)); err != nil {
		return fmt.Errorf("dma: free %#x: %w", b.addr, err)
	}
	return nil
}

func (s *System) region(attr Attr) (RegionConfig, *Arena, uint32) {
	if attr == Coherent {
		return s.cfg.Coherent, s.coh, tagCoherent
	}
	return s.cfg.Cached, s.cached, tagCached
}

// Map implements Memory.
func (s *System) Map(b *Buffer, p []byte, dir Dir) error {
	b.cpu, b.addr, b.tag = nil, 0, 0
	if len(p) == 0 {
		return fmt.Errorf("dma: map of empty slice")
	}
	c := cpuAddr(p)
	if c < s.cfg.RAMStart || c+uintptr(len(p)) > s.cfg.RAMEnd {
		return fmt.Errorf("dma: map %#x+%d: %w", c, len(p), ErrUnreadable)
	}
	b.cpu, b.addr, b.tag = p, Addr(c)+s.cfg.BusOffset, tagMapped
	if s.l1 {
		// SyncForDevice's work without its call and checks: a mapping is
		// RAM, maintained whatever the regions' attributes (TX maps a
		// payload per TSO segment).
		l1Sync(c, len(p), dir)
		return nil
	}
	s.SyncForDevice(b, 0, len(p), dir)
	return nil
}

// Unmap implements Memory.
func (s *System) Unmap(b *Buffer, dir Dir) error {
	if b.tag != tagMapped {
		return fmt.Errorf("dma: unmap %#x: %w", b.addr, ErrNotMapped)
	}
	s.SyncForCPU(b, 0, len(b.cpu), dir)
	return nil
}

// SyncForDevice implements Memory.
func (s *System) SyncForDevice(b *Buffer, off, n int, dir Dir) {
	p := b.cpu[off : off+n]
	if s.cfg.Cache == nil || s.uncached(b.tag) || len(p) == 0 {
		s.Barrier()
		return
	}
	c := cpuAddr(p)
	if s.l1 {
		l1Sync(c, len(p), dir)
		return
	}
	switch dir {
	case ToDevice:
		s.cfg.Cache.Clean(c, len(p))
	case FromDevice:
		s.cfg.Cache.Invalidate(c, len(p))
	default:
		s.cfg.Cache.CleanInvalidate(c, len(p))
	}
	s.cfg.Cache.Barrier()
}

// SyncForCPU implements Memory.
func (s *System) SyncForCPU(b *Buffer, off, n int, dir Dir) {
	if dir == ToDevice {
		// Nothing to do: the CPU's lines were cleaned, not discarded, and
		// the device only read. Checked first: the TX completion path
		// calls this once per descriptor (dma/dmatest checks its ranges).
		return
	}
	p := b.cpu[off : off+n]
	if s.cfg.Cache == nil || s.uncached(b.tag) || len(p) == 0 {
		return
	}
	// Invalidate again after the transfer: the CPU may have speculatively
	// refilled lines while the device owned them.
	if s.l1 {
		l1Sync(cpuAddr(p), len(p), FromDevice)
		return
	}
	s.cfg.Cache.Invalidate(cpuAddr(p), len(p))
	s.cfg.Cache.Barrier()
}

// uncached reports whether a buffer tagged tag lies in memory the MMU maps
// uncached.
func (s *System) uncached(tag uint32) bool {
	return tag == tagCoherent || tag == tagCached && s.cfg.Cached.Uncached
}

// Barrier implements Memory.
func (s *System) Barrier() {
	if s.l1 {
		l1Barrier()
		return
	}
	if s.cfg.Cache != nil {
		s.cfg.Cache.Barrier()
	}
}
