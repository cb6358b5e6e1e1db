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
	// PL310SlvErr: a write to AUX_CTRL or the tag/data RAM latency
	// registers with the L2 enabled; the L2C-310 answers it with SLVERR
	// and keeps the old value (L2C-310 TRM, Auxiliary Control and
	// Latency Control registers; U-Boot mx6 soc.c disables the L2 before
	// changing them, Linux l2c_enable "must only be called when the cache
	// controller is known to be disabled").
	PL310SlvErr
	// PL310EnabledDirty: CTRL.EN set without a full invalidate by way
	// since reset: the tag RAM content is undefined at power-up (Linux
	// l2c_enable invalidates all ways, syncs, then enables).
	PL310EnabledDirty
	// PL310Erratum752271: the L2 enabled with PREFETCH_CTRL double
	// linefill (bit 30) set on an r3p0-r3p1 controller (the i.MX6D/Q's is
	// r3p1-50rel0, CACHE_ID 0x410000C7): data corruption (ARM erratum
	// 752271; Linux l2c310_fixup clears the bit for those revisions).
	PL310Erratum752271
)

var hierKindNames = map[int]string{
	DirtyL1AtDeviceRead: "dirty L1 line at device read",
	DirtyL2AtDeviceRead: "dirty L2 line at device read",
	DirtyAtDeviceWrite:  "dirty line over device write",
	StaleLineRead:       "stale cached line read by the CPU",
	UnsyncedOuter:       "device access before PL310 CACHE_SYNC",
	PL310SlvErr:         "PL310 configuration write with the L2 enabled (SLVERR)",
	PL310EnabledDirty:   "PL310 enabled without an invalidate of all ways",
	PL310Erratum752271:  "PL310 r3p0-r3p1 enabled with double linefill (erratum 752271)",
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
	ctl             pl310Ctl
	viol            []HierViolation
	// Ops records the maintenance operations in order ("L1 clean",
	// "L2 inv", ...), for tests of the order itself.
	Ops []string
}

// NewHierarchy returns a model of size bytes of DRAM at base (line
// aligned), all caches empty.
func NewHierarchy(base uintptr, size int) *Hierarchy {
	return &Hierarchy{Base: base, dram: make([]byte, size), gen: map[uintptr]uint64{},
		l1: map[uintptr]*hline{}, l2: map[uintptr]*hline{}, ctl: pl310Ctl{id: PL310CacheIDIMX6Q, aux: PL310AuxResetIMX6Q}}
}

// PL310 control registers the model keeps (offsets as Linux
// arch/arm/include/asm/hardware/cache-l2x0.h: L2X0_CACHE_ID 0x000,
// L2X0_CTRL 0x100, L2X0_AUX_CTRL 0x104, L310_TAG_LATENCY_CTRL 0x108,
// L310_DATA_LATENCY_CTRL 0x10C, L2X0_INV_WAY 0x77C, L310_PREFETCH_CTRL
// 0xF60).
const (
	pl310CacheID  = 0x000
	pl310Ctrl     = 0x100
	pl310Aux      = 0x104
	pl310TagLat   = 0x108
	pl310DataLat  = 0x10C
	pl310InvWay   = 0x77C
	pl310Prefetch = 0xF60

	// PL310CacheIDIMX6Q is the i.MX6D/Q's CACHE_ID: ARM, part L2C-310
	// (0x3 << 6), RTL release 7 = r3p1-50rel0 (Linux boot log
	// "L2C-310: CACHE_ID 0x410000c7, AUX_CTRL 0x76470001" with "errata
	// 752271 769419 enabled"; i.MX6DL/SX/QP have r3p2, 0x410000C8).
	PL310CacheIDIMX6Q = 0x410000C7
	// PL310AuxResetIMX6Q is AUX_CTRL before software: 16 ways (bit 16)
	// of 64 KiB (way size 3 in 19:17), 1 MiB, round-robin (bit 25).
	PL310AuxResetIMX6Q = 0x02070000
)

type pl310Ctl struct {
	id, ctrl, aux, tag, data, prefetch uint32
	invalidated                        bool // all ways invalidated since reset
}

// SetPL310ID sets the CACHE_ID the model reports (RTL release in 5:0).
func (h *Hierarchy) SetPL310ID(id uint32) { h.ctl.id = id }

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
// "Cache maintenance operations"; offsets as Linux cache-l2x0.h:
// L2X0_CACHE_SYNC 0x730, L2X0_INV_LINE_PA 0x770, L2X0_CLEAN_LINE_PA
// 0x7B0, L2X0_CLEAN_INV_LINE_PA 0x7F0, address bits 4:0 ignored for the
// 32-byte line), and the control registers EnableL2 programs (CACHE_ID,
// CTRL, AUX_CTRL, the latencies, INV_WAY, PREFETCH_CTRL). Other registers
// read as zero.
//
// Errata checked for the i.MX6 revisions (r3p1-50rel0 and r3p2; gating
// as Linux l2c310_fixup): 588369 (clean+invalidate by PA leaves clean
// lines, below r2p0) and 727915 (background clean+invalidate by way,
// r2p0 to below r3p1) do not apply, so a clean+invalidate by PA drops the
// line here; 753970 (CACHE_SYNC, r3p0 only) does not apply; 752271
// (double linefill, r3p0 to below r3p2) applies to the i.MX6D/Q and is
// enforced; 769419 (store buffer not drained without CACHE_SYNC, all
// revisions Linux enables it for) is what UnsyncedOuter stands for.
func (h *Hierarchy) PL310() PL310Regs { return PL310Regs{h} }

// PL310Regs is the register view of the model's L2.
type PL310Regs struct{ h *Hierarchy }

// Read32 implements mmio.Regs: CACHE_SYNC and INV_WAY read 0
// (operations complete at once in the model; line operations are atomic
// on the L2C-310, Linux cache-l2x0.c cache_wait "cache operations by
// line are atomic on PL310"); the control registers read back.
func (r PL310Regs) Read32(off uint32) uint32 {
	c := &r.h.ctl
	switch off {
	case pl310CacheID:
		return c.id
	case pl310Ctrl:
		return c.ctrl
	case pl310Aux:
		return c.aux
	case pl310TagLat:
		return c.tag
	case pl310DataLat:
		return c.data
	case pl310Prefetch:
		return c.prefetch
	}
	return 0
}

// control handles the configuration registers; it reports whether off
// was one.
func (r PL310Regs) control(off, v uint32) bool {
	h, c := r.h, &r.h.ctl
	on := c.ctrl&1 != 0
	switch off {
	case pl310Aux, pl310TagLat, pl310DataLat:
		if on {
			h.report(PL310SlvErr, uintptr(off))
			return true
		}
		switch off {
		case pl310Aux:
			c.aux = v
		case pl310TagLat:
			c.tag = v
		default:
			c.data = v
		}
	case pl310Prefetch:
		c.prefetch = v
	case pl310InvWay:
		all := uint32(0xFF)
		if c.aux&(1<<16) != 0 {
			all = 0xFFFF
		}
		if v&all == all {
			c.invalidated = true
		}
	case pl310Ctrl:
		if v&1 != 0 && !on {
			if !c.invalidated {
				h.report(PL310EnabledDirty, 0)
			}
			if rtl := c.id & 0x3F; rtl >= 5 && rtl < 8 && c.prefetch&(1<<30) != 0 {
				h.report(PL310Erratum752271, 0)
			}
		}
		c.ctrl = v & 1
	default:
		return false
	}
	return true
}

// Write32 implements mmio.Regs.
func (r PL310Regs) Write32(off, v uint32) {
	h := r.h
	defer h.evict()
	if r.control(off, v) {
		return
	}
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
