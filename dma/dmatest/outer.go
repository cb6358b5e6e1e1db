package dmatest

import (
	"fmt"
	"sort"

	"github.com/tamanic/tamanic/dma"
)

// Two-level cache model: a Cortex-A9's L1 data cache in front of a PL310
// L2, both write-back with 32-byte lines, in front of DRAM that a device
// reads and writes directly (the i.MX6Q's ENET is not coherent with
// either). Memory reaches DRAM only through a clean of both levels in
// order; a device write is seen by the CPU only once both levels dropped
// their copies. dma.TwoLevel (the code ARMv7Cache runs) drives it with the
// L1 as its InnerCache and dma.PL310 writing the model's registers.

// Hierarchy violation kinds.
const (
	// DirtyL1AtDeviceRead: the device reads DRAM under a dirty L1 line (a
	// missing inner clean).
	DirtyL1AtDeviceRead = iota + 100
	// DirtyL2AtDeviceRead: the device reads DRAM under a dirty L2 line (a
	// missing outer clean, or the outer clean done before the inner one).
	DirtyL2AtDeviceRead
	// DirtyAtDeviceWrite: a dirty line in either level covers memory the
	// device writes: its eviction would later overwrite the device's data.
	DirtyAtDeviceWrite
	// StaleLineRead: the CPU reads a line cached (in L1 or L2) from before
	// the device's last write to it (a missing invalidate, or one in the
	// wrong order).
	StaleLineRead
	// UnsyncedOuter: the device accessed DRAM while PL310 line operations
	// were not yet completed by CACHE_SYNC.
	UnsyncedOuter
)

var hierKindNames = map[int]string{
	DirtyL1AtDeviceRead: "dirty L1 line at device read",
	DirtyL2AtDeviceRead: "dirty L2 line at device read",
	DirtyAtDeviceWrite:  "dirty line over device write",
	StaleLineRead:       "stale cached line read by the CPU",
	UnsyncedOuter:       "device access before PL310 CACHE_SYNC",
}

// HierViolation is one violation found by the hierarchy model.
type HierViolation struct {
	Kind int
	Line uintptr // physical address of the line
}

func (v HierViolation) String() string {
	return fmt.Sprintf("cache violation: %s at %#x", hierKindNames[v.Kind], v.Line)
}

// HierLine is the line size of both levels.
const HierLine = 32

type hline struct {
	data  [HierLine]byte
	dirty bool
	gen   uint64 // DRAM generation of the line when it was filled
}

// Hierarchy is the two-level cache model over DRAM at [Base, Base+len).
type Hierarchy struct {
	Base uintptr
	dram []byte
	gen  map[uintptr]uint64 // device writes per line
	l1   map[uintptr]*hline
	l2   map[uintptr]*hline
	// EvictBetweenOps makes the L1 write every dirty line back to L2
	// after each maintenance operation and barrier, as silicon may at any
	// time (cache pressure): it exposes orders that leave a window between
	// the levels.
	EvictBetweenOps bool
	unsynced        bool
	viol            []HierViolation
	// Ops records the maintenance operations in order ("L1 clean",
	// "L2 inv", ...), for tests of the order itself.
	Ops []string
}

// NewHierarchy returns a model of size bytes of DRAM at base (line
// aligned), all caches empty.
func NewHierarchy(base uintptr, size int) *Hierarchy {
	return &Hierarchy{Base: base, dram: make([]byte, size), gen: map[uintptr]uint64{},
		l1: map[uintptr]*hline{}, l2: map[uintptr]*hline{}}
}

// Take returns and clears the violations found so far.
func (h *Hierarchy) Take() []HierViolation {
	v := h.viol
	h.viol = nil
	return v
}

func (h *Hierarchy) report(k int, line uintptr) {
	h.viol = append(h.viol, HierViolation{Kind: k, Line: line})
}

func lineOf(a uintptr) uintptr { return a &^ (HierLine - 1) }

func (h *Hierarchy) dramLine(la uintptr) []byte {
	o := la - h.Base
	return h.dram[o : o+HierLine]
}

// fill returns the L1 line at la, filling it from L2 or DRAM (and L2 from
// DRAM) as a read or write allocation does.
func (h *Hierarchy) fill(la uintptr) *hline {
	if l, ok := h.l1[la]; ok {
		return l
	}
	l2, ok := h.l2[la]
	if !ok {
		l2 = &hline{gen: h.gen[la]}
		copy(l2.data[:], h.dramLine(la))
		h.l2[la] = l2
	}
	l := &hline{data: l2.data, gen: l2.gen}
	h.l1[la] = l
	return l
}

// CPUWrite stores p at pa through the caches (write-back, write-allocate).
func (h *Hierarchy) CPUWrite(pa uintptr, p []byte) {
	for i := range p {
		l := h.fill(lineOf(pa + uintptr(i)))
		l.data[(pa+uintptr(i))&(HierLine-1)] = p[i]
		l.dirty = true
	}
}

// CPURead loads n bytes at pa through the caches, reporting lines cached
// from before the device's last write to them.
func (h *Hierarchy) CPURead(pa uintptr, n int) []byte {
	out := make([]byte, n)
	reported := map[uintptr]bool{}
	for i := range out {
		la := lineOf(pa + uintptr(i))
		l := h.fill(la)
		if l.gen < h.gen[la] && !reported[la] {
			reported[la] = true
			h.report(StaleLineRead, la)
		}
		out[i] = l.data[(pa+uintptr(i))&(HierLine-1)]
	}
	return out
}

// Speculate fills the L1 (and L2) with the lines of [pa, pa+n), as a
// core's prefetcher may at any time for memory mapped cacheable.
func (h *Hierarchy) Speculate(pa uintptr, n int) {
	for a := lineOf(pa); a < pa+uintptr(n); a += HierLine {
		h.fill(a)
	}
}

func (h *Hierarchy) lines(start, end uintptr) []uintptr {
	var ls []uintptr
	for a := lineOf(start); a < end; a += HierLine {
		ls = append(ls, a)
	}
	return ls
}

// DeviceRead returns n bytes of DRAM at pa as the device reads them.
func (h *Hierarchy) DeviceRead(pa uintptr, n int) []byte {
	if h.unsynced {
		h.report(UnsyncedOuter, lineOf(pa))
	}
	for _, la := range h.lines(pa, pa+uintptr(n)) {
		if l, ok := h.l1[la]; ok && l.dirty {
			h.report(DirtyL1AtDeviceRead, la)
		} else if l, ok := h.l2[la]; ok && l.dirty {
			h.report(DirtyL2AtDeviceRead, la)
		}
	}
	o := pa - h.Base
	return append([]byte(nil), h.dram[o:o+uintptr(n)]...)
}

// DeviceWrite stores p into DRAM at pa as the device does.
func (h *Hierarchy) DeviceWrite(pa uintptr, p []byte) {
	if h.unsynced {
		h.report(UnsyncedOuter, lineOf(pa))
	}
	for _, la := range h.lines(pa, pa+uintptr(len(p))) {
		l1, ok1 := h.l1[la]
		l2, ok2 := h.l2[la]
		if ok1 && l1.dirty || ok2 && l2.dirty {
			h.report(DirtyAtDeviceWrite, la)
		}
		h.gen[la]++
	}
	copy(h.dram[pa-h.Base:], p)
}

// evict writes every dirty L1 line back to L2 (keeping it, clean).
func (h *Hierarchy) evict() {
	if !h.EvictBetweenOps {
		return
	}
	for _, la := range sortedKeys(h.l1) {
		if l := h.l1[la]; l.dirty {
			h.l2[la] = &hline{data: l.data, dirty: true, gen: l.gen}
			l.dirty = false
		}
	}
}

func sortedKeys(m map[uintptr]*hline) []uintptr {
	ks := make([]uintptr, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// L1 returns the model's inner cache, the InnerCache of dma.TwoLevel.
func (h *Hierarchy) L1() dma.InnerCache { return l1ops{h} }

type l1ops struct{ h *Hierarchy }

func (o l1ops) op(name string, start, end uintptr, clean, inv bool) {
	h := o.h
	defer h.evict()
	h.Ops = append(h.Ops, "L1 "+name)
	for _, la := range h.lines(start, end) {
		l, ok := h.l1[la]
		if !ok {
			continue
		}
		if clean && l.dirty {
			h.l2[la] = &hline{data: l.data, dirty: true, gen: l.gen}
			l.dirty = false
		}
		if inv {
			delete(h.l1, la)
		}
	}
}

func (o l1ops) Clean(start, end uintptr)           { o.op("clean", start, end, true, false) }
func (o l1ops) Invalidate(start, end uintptr)      { o.op("inv", start, end, false, true) }
func (o l1ops) CleanInvalidate(start, end uintptr) { o.op("clean+inv", start, end, true, true) }
func (o l1ops) Barrier()                           { o.h.evict() }

// PL310 returns the model's L2 controller registers, for dma.PL310.Regs:
// the by-PA line operations and CACHE_SYNC (L2C-310 TRM r3p3, 3.3.10
// "Cache maintenance operations"). Other registers read as zero.
func (h *Hierarchy) PL310() PL310Regs { return PL310Regs{h} }

// PL310Regs is the register view of the model's L2.
type PL310Regs struct{ h *Hierarchy }

// Read32 implements mmio.Regs: CACHE_SYNC reads 0 (operations complete at
// once in the model).
func (r PL310Regs) Read32(off uint32) uint32 { return 0 }

// Write32 implements mmio.Regs.
func (r PL310Regs) Write32(off, v uint32) {
	h := r.h
	defer h.evict()
	la := lineOf(uintptr(v))
	var clean, inv bool
	switch off {
	case dma.PL310_CACHE_SYNC:
		h.Ops = append(h.Ops, "L2 sync")
		h.unsynced = false
		return
	case dma.PL310_CLEAN_LINE_PA:
		h.Ops = append(h.Ops, "L2 clean")
		clean = true
	case dma.PL310_INV_LINE_PA:
		h.Ops = append(h.Ops, "L2 inv")
		inv = true
	case dma.PL310_CLEAN_INV_LINE_PA:
		h.Ops = append(h.Ops, "L2 clean+inv")
		clean, inv = true, true
	default:
		return
	}
	h.unsynced = true
	l, ok := h.l2[la]
	if !ok {
		return
	}
	if clean && l.dirty {
		copy(h.dramLine(la), l.data[:])
		l.dirty = false
	}
	if inv {
		delete(h.l2, la)
	}
}
