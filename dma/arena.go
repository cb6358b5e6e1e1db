package dma

import (
	"fmt"
	"sort"
)

// Arena is a first-fit allocator of offsets within [0, size). It carves
// regions of DMA memory at initialisation time; it is not meant for the
// per-frame path (drivers allocate their rings and buffers once). It is not
// safe for concurrent use.
type Arena struct {
	size int
	free []span      // sorted by offset, coalesced
	used map[int]int // offset -> size
}

type span struct{ off, n int }

// NewArena returns an arena managing size bytes.
func NewArena(size int) *Arena {
	return &Arena{size: size, free: []span{{0, size}}, used: make(map[int]int)}
}

// Alloc returns the offset of n bytes aligned (relative to offset 0) to align.
func (a *Arena) Alloc(n, align int) (int, error) {
	if align <= 0 || align&(align-1) != 0 {
		return 0, fmt.Errorf("%w: %d", ErrBadAlign, align)
	}
	if n <= 0 {
		return 0, fmt.Errorf("dma: allocation of %d bytes", n)
	}
	for i, s := range a.free {
		off := AlignUp(s.off, align)
		if off+n > s.off+s.n {
			continue
		}
		// Split s into [s.off, off) and [off+n, end).
		var rest []span
		if off > s.off {
			rest = append(rest, span{s.off, off - s.off})
		}
		if end := s.off + s.n; off+n < end {
			rest = append(rest, span{off + n, end - off - n})
		}
		a.free = append(a.free[:i], append(rest, a.free[i+1:]...)...)
		a.used[off] = n
		return off, nil
	}
	return 0, fmt.Errorf("%w: %d bytes aligned %d (arena %d bytes, %d free)", ErrNoMemory, n, align, a.size, a.Free())
}

// Release frees the allocation at off.
func (a *Arena) Release(off int) error {
	n, ok := a.used[off]
	if !ok {
		return fmt.Errorf("%w: offset %#x", ErrNotMapped, off)
	}
	delete(a.used, off)
	a.free = append(a.free, span{off, n})
	sort.Slice(a.free, func(i, j int) bool { return a.free[i].off < a.free[j].off })
	merged := a.free[:1]
	for _, s := range a.free[1:] {
		last := &merged[len(merged)-1]
		if last.off+last.n == s.off {
			last.n += s.n
		} else {
			merged = append(merged, s)
		}
	}
	a.free = merged
	return nil
}

// SizeOf returns the size of the allocation at off, or 0.
func (a *Arena) SizeOf(off int) int { return a.used[off] }

// Free returns the number of unallocated bytes.
func (a *Arena) Free() int {
	t := 0
	for _, s := range a.free {
		t += s.n
	}
	return t
}
