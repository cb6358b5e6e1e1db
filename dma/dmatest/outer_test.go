package dmatest

import (
	"bytes"
	"testing"

	"github.com/tamanic/tamanic/dma"
)

const hierBase = 0x10000000

// twoLevel is the code ARMv7Cache runs on an i.MX6Q, on the model.
func twoLevel(h *Hierarchy) dma.TwoLevel {
	return dma.TwoLevel{Inner: h.L1(), Outer: &dma.PL310{Regs: h.PL310()}}
}

func hierKinds(vs []HierViolation) map[int]int {
	m := map[int]int{}
	for _, v := range vs {
		m[v.Kind]++
	}
	return m
}

// txCase writes a frame through the caches, cleans it with c and lets the
// device read it.
func txCase(t *testing.T, h *Hierarchy, c dma.CacheOps, pa uintptr, n int) []byte {
	t.Helper()
	frame := bytes.Repeat([]byte{0xA5, 0x5A, 0x3C}, n/3+1)[:n]
	h.CPUWrite(pa, frame)
	c.Clean(pa, n)
	c.Barrier()
	got := h.DeviceRead(pa, n)
	if !bytes.Equal(got, frame) && len(h.viol) == 0 {
		t.Errorf("device read stale data with no violation reported")
	}
	return got
}

func TestHierarchyTwoLevelClean(t *testing.T) {
	for _, evict := range []bool{false, true} {
		h := NewHierarchy(hierBase, 1<<16)
		h.EvictBetweenOps = evict
		txCase(t, h, twoLevel(h), hierBase+0x1004, 1514) // unaligned both ends
		if v := h.Take(); len(v) != 0 {
			t.Errorf("evict=%v: TwoLevel clean: %v", evict, v)
		}
	}
}

// Without the PL310 in the configuration (the A7 boards' ARMv7Cache on an
// A9), the data stops in L2: the device reads stale DRAM.
func TestHierarchyMissingL2Clean(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	txCase(t, h, dma.TwoLevel{Inner: h.L1()}, hierBase+0x1000, 1514)
	if k := hierKinds(h.Take()); k[DirtyL2AtDeviceRead] == 0 {
		t.Fatalf("missing L2 clean not reported: %v", k)
	}
}

// outerFirst cleans the outer level before the inner one: the wrong order.
type outerFirst struct{ dma.TwoLevel }

func (c outerFirst) Clean(start uintptr, n int) {
	c.Outer.Clean(start, n)
	_ = c.Outer.Sync()
	c.Inner.Clean(start, start+uintptr(n))
}

func TestHierarchyWrongCleanOrder(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	txCase(t, h, outerFirst{twoLevel(h)}, hierBase+0x1000, 1514)
	if k := hierKinds(h.Take()); k[DirtyL2AtDeviceRead] == 0 {
		t.Fatalf("outer-then-inner clean not reported: %v", k)
	}
}

// A PL310 line operation the device overtakes before CACHE_SYNC.
type noSync struct{ dma.TwoLevel }

func (c noSync) Clean(start uintptr, n int) {
	c.Inner.Clean(start, start+uintptr(n))
	c.Outer.Clean(start, n)
}

func TestHierarchyMissingSync(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	txCase(t, h, noSync{twoLevel(h)}, hierBase+0x1000, 64)
	if k := hierKinds(h.Take()); k[UnsyncedOuter] == 0 {
		t.Fatalf("missing CACHE_SYNC not reported: %v", k)
	}
}

// rxCase hands a buffer the CPU has dirtied and cached to the device
// (SyncForDevice FromDevice: Invalidate), lets the prefetcher refill it
// during the DMA, has the device write it, takes it back (SyncForCPU:
// Invalidate) and reads it.
func rxCase(t *testing.T, h *Hierarchy, c dma.CacheOps, pa uintptr, n int) []byte {
	t.Helper()
	h.CPUWrite(pa, bytes.Repeat([]byte{0xEE}, n)) // the buffer's previous use
	c.Invalidate(pa, n)
	c.Barrier()
	h.Speculate(pa, n)
	frame := bytes.Repeat([]byte{1, 2, 3, 4, 5}, n/5+1)[:n]
	h.DeviceWrite(pa, frame)
	c.Invalidate(pa, n)
	c.Barrier()
	got := h.CPURead(pa, n)
	if !bytes.Equal(got, frame) && len(h.viol) == 0 {
		t.Errorf("CPU read stale data with no violation reported")
	}
	return got
}

func TestHierarchyTwoLevelInvalidate(t *testing.T) {
	for _, evict := range []bool{false, true} {
		h := NewHierarchy(hierBase, 1<<16)
		h.EvictBetweenOps = evict
		rxCase(t, h, twoLevel(h), hierBase+0x2000, 1536)
		if v := h.Take(); len(v) != 0 {
			t.Errorf("evict=%v: TwoLevel invalidate: %v", evict, v)
		}
	}
}

// oldInvalidate is ARMv7Cache's order before TwoLevel: outer, then inner.
// Handing a buffer to the device, a dirty L1 line evicted between the two
// lands dirty in the just-invalidated L2, to be written over the DMA data.
type oldInvalidate struct{ dma.TwoLevel }

func (c oldInvalidate) Invalidate(start uintptr, n int) {
	c.Outer.Invalidate(start, n)
	_ = c.Outer.Sync()
	c.Inner.Invalidate(start, start+uintptr(n))
}

func TestHierarchyOuterFirstInvalidateRace(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	h.EvictBetweenOps = true
	rxCase(t, h, oldInvalidate{twoLevel(h)}, hierBase+0x2000, 1536)
	if k := hierKinds(h.Take()); k[DirtyAtDeviceWrite] == 0 {
		t.Fatalf("outer-then-inner invalidate with an eviction between not reported: %v", k)
	}
}

// An inner-only invalidate on an A9 leaves the prefetched L2 line: the CPU
// reads what was there before the DMA.
func TestHierarchyMissingL2Invalidate(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	got := rxCase(t, h, dma.TwoLevel{Inner: h.L1()}, hierBase+0x2000, 256)
	k := hierKinds(h.Take())
	if k[StaleLineRead] == 0 && k[DirtyAtDeviceWrite] == 0 {
		t.Fatalf("missing L2 invalidate not reported (read %x...)", got[:8])
	}
}

// Partial lines at both ends keep the neighbours' bytes through an
// invalidate, at both levels.
func TestHierarchyInvalidateKeepsNeighbours(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	c := twoLevel(h)
	h.CPUWrite(hierBase+0x3000, bytes.Repeat([]byte{0x77}, 0x100))
	c.Invalidate(hierBase+0x3010, 0xE0) // [0x3010, 0x30F0)
	c.Barrier()
	if got := h.CPURead(hierBase+0x3000, 0x10); !bytes.Equal(got, bytes.Repeat([]byte{0x77}, 0x10)) {
		t.Fatalf("head neighbour lost: %x", got)
	}
	if got := h.CPURead(hierBase+0x30F0, 0x10); !bytes.Equal(got, bytes.Repeat([]byte{0x77}, 0x10)) {
		t.Fatalf("tail neighbour lost: %x", got)
	}
	if got := h.DeviceRead(hierBase+0x3000, 0x10); !bytes.Equal(got, bytes.Repeat([]byte{0x77}, 0x10)) {
		t.Fatalf("head neighbour not written back to DRAM: %x", got)
	}
}

func TestHierarchyOrderLog(t *testing.T) {
	h := NewHierarchy(hierBase, 1<<16)
	c := twoLevel(h)
	c.Clean(hierBase, 32)
	c.Invalidate(hierBase, 32)
	want := []string{"L1 clean", "L2 clean", "L2 sync", "L1 inv", "L2 inv", "L2 sync", "L1 inv"}
	if len(h.Ops) != len(want) {
		t.Fatalf("ops %v, want %v", h.Ops, want)
	}
	for i := range want {
		if h.Ops[i] != want[i] {
			t.Fatalf("ops %v, want %v", h.Ops, want)
		}
	}
	if s := (HierViolation{Kind: StaleLineRead, Line: 0x40}).String(); s != "cache violation: stale cached line read by the CPU at 0x40" {
		t.Errorf("String: %q", s)
	}
}

// The PL310 model's control rules, driven directly with wrong sequences.
func TestPL310ControlRules(t *testing.T) {
	h := NewHierarchy(hierBase, 4096)
	r := h.PL310()
	if r.Read32(0) != PL310CacheIDIMX6Q || r.Read32(0x104) != PL310AuxResetIMX6Q {
		t.Fatalf("CACHE_ID %#x AUX %#x", r.Read32(0), r.Read32(0x104))
	}
	r.Write32(0xF60, 1<<30) // double linefill on an r3p1
	r.Write32(0x100, 1)     // enabled without invalidating the ways
	if k := hierKinds(h.Take()); k[PL310EnabledDirty] != 1 || k[PL310Erratum752271] != 1 {
		t.Fatalf("enable: %v", k)
	}
	r.Write32(0x104, 0) // AUX with the L2 on
	r.Write32(0x108, 0) // tag latency
	r.Write32(0x10C, 0) // data latency
	if k := hierKinds(h.Take()); k[PL310SlvErr] != 3 {
		t.Fatalf("configuration with the L2 on: %v", k)
	}
	if r.Read32(0x104) != PL310AuxResetIMX6Q {
		t.Error("AUX changed by a refused write")
	}
	// The right order: off, configure, invalidate all 16 ways, enable.
	h = NewHierarchy(hierBase, 4096)
	r = h.PL310()
	r.Write32(0x104, PL310AuxResetIMX6Q|1<<22)
	r.Write32(0x77C, 0xFF) // 8 ways only: not all of a 16-way cache
	r.Write32(0x100, 1)
	if k := hierKinds(h.Take()); k[PL310EnabledDirty] != 1 {
		t.Fatalf("half invalidate: %v", k)
	}
	h = NewHierarchy(hierBase, 4096)
	r = h.PL310()
	r.Write32(0x77C, 0xFFFF)
	r.Write32(0x730, 0)
	r.Write32(0x100, 1)
	if v := h.Take(); len(v) != 0 {
		t.Fatalf("correct enable: %v", v)
	}
}
