package dmatest

import (
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// lineRange returns the line indexes covered by b in the cached region and
// b's offset there, or ok=false if b is not cached memory of this model.
func (m *Memory) lineRange(b dma.Buffer) (first, last, off int, ok bool) {
	r := &m.cached
	if b.Tag() != tagCached || b.Addr() < r.base || b.Addr()+dma.Addr(b.Len()) > r.base+dma.Addr(len(r.cpu)) {
		return 0, 0, 0, false
	}
	off = int(b.Addr() - r.base)
	return off / dma.CacheLine, (off + b.Len() - 1) / dma.CacheLine, off, true
}

// checkWhole reports SharedLine unless [off, off+n) covers whole cache
// lines of one allocation. Cached allocations are padded to whole lines, so a
// range must start on a line and stay inside its allocation; its last line
// then belongs to the allocation alone.
func (m *Memory) checkWhole(off, n int, pc uintptr) {
	r := &m.cached
	if _, ok := r.find(off, n); !ok || off%dma.CacheLine != 0 {
		m.report(SharedLine, m.areaName(r, off), r.base+dma.Addr(off), 0, pc)
	}
}

// syncTarget handles syncs of coherent memory (nothing to do) and mappings,
// and returns the cache lines of a cached buffer still to be processed.
func (m *Memory) syncTarget(b dma.Buffer, dir dma.Dir, toDevice bool, pc uintptr) (first, last, off int, ok bool) {
	switch {
	case b.Tag() == tagCoherent:
		return 0, 0, 0, false
	case b.Tag() >= tagMapBase:
		m.syncMapping(b, dir, toDevice)
		return 0, 0, 0, false
	}
	first, last, off, ok = m.lineRange(b)
	if !ok {
		m.report(BadBuffer, "sync", b.Addr(), 0, pc)
	}
	return first, last, off, ok && b.Len() > 0
}

// syncRange returns the n bytes at off of *b, or reports BadBuffer if they
// are not all inside it (on silicon, maintenance of bytes the caller does
// not own).
func (m *Memory) syncRange(b *dma.Buffer, off, n int, pc uintptr) (dma.Buffer, bool) {
	if off < 0 || n < 0 || off > b.Len() || n > b.Len()-off {
		m.report(BadBuffer, fmt.Sprintf("sync of %d bytes at %d of a %d-byte buffer", n, off, b.Len()), b.Addr(), off, pc)
		return dma.Buffer{}, false
	}
	return b.Slice(off, n), true
}

// SyncForDevice implements dma.Memory.
func (m *Memory) SyncForDevice(bp *dma.Buffer, off, n int, dir dma.Dir) {
	pc := m.caller()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.syncRange(bp, off, n, pc)
	if !ok {
		return
	}
	first, last, off, ok := m.syncTarget(b, dir, true, pc)
	if !ok {
		return
	}
	r := &m.cached
	if dir&dma.FromDevice != 0 && dir != dma.Bidirectional {
		m.checkWhole(off, b.Len(), pc)
	}
	for i := first; i <= last; i++ {
		l := &r.lines[i]
		lo, hi := i*dma.CacheLine, (i+1)*dma.CacheLine
		if l.written {
			// The CPU is handing back a line the device wrote without ever
			// invalidating it: whatever it read there was stale.
			m.report(StaleCPURead, m.areaName(r, lo), r.base+dma.Addr(lo), lo-off, l.site)
			l.written = false
		}
		switch dir {
		case dma.ToDevice:
			copy(r.ram[lo:hi], r.cpu[lo:hi])
			m.counters.Cleaned += dma.CacheLine
		case dma.FromDevice:
			copy(r.cpu[lo:hi], r.ram[lo:hi]) // dirty CPU data is discarded
			m.counters.Invalidated += dma.CacheLine
		default:
			copy(r.ram[lo:hi], r.cpu[lo:hi])
			m.counters.Cleaned += dma.CacheLine
			m.counters.Invalidated += dma.CacheLine
		}
		l.dev, l.site = true, pc
	}
}

// SyncForCPU implements dma.Memory.
func (m *Memory) SyncForCPU(bp *dma.Buffer, off, n int, dir dma.Dir) {
	pc := m.caller()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.syncRange(bp, off, n, pc)
	if !ok {
		return
	}
	first, last, off, ok := m.syncTarget(b, dir, false, pc)
	if !ok {
		return
	}
	r := &m.cached
	if dir&dma.FromDevice != 0 {
		m.checkWhole(off, b.Len(), pc)
	}
	for i := first; i <= last; i++ {
		l := &r.lines[i]
		lo, hi := i*dma.CacheLine, (i+1)*dma.CacheLine
		if dir&dma.FromDevice != 0 {
			copy(r.cpu[lo:hi], r.ram[lo:hi])
			m.counters.Invalidated += dma.CacheLine
			l.written = false
		} else if l.written {
			m.report(StaleCPURead, m.areaName(r, lo), r.base+dma.Addr(lo), lo-off, l.site)
			l.written = false
		}
		l.dev, l.site = false, pc
	}
}

func (m *Memory) syncMapping(b dma.Buffer, dir dma.Dir, toDevice bool) {
	slot := int(b.Tag()) - tagMapBase
	if slot >= len(m.maps) || !m.maps[slot].live {
		m.report(BadBuffer, "sync of mapping", b.Addr(), 0, 0)
		return
	}
	mp := &m.maps[slot]
	o := int(b.Addr() - mp.addr)
	if o < 0 || o+b.Len() > len(mp.cpu) {
		m.report(BadBuffer, "sync of mapping", b.Addr(), 0, 0)
		return
	}
	if toDevice && dir&dma.ToDevice != 0 {
		copy(mp.shadow[o:o+b.Len()], mp.cpu[o:o+b.Len()])
	}
	if !toDevice && dir&dma.FromDevice != 0 {
		copy(mp.cpu[o:o+b.Len()], mp.shadow[o:o+b.Len()])
	}
}

// Barrier implements dma.Memory.
func (m *Memory) Barrier() {
	m.mu.Lock()
	m.counters.Barriers++
	m.mu.Unlock()
}
