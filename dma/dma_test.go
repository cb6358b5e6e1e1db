package dma_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tamanic/tamanic/dma"
)

func TestArenaFirstFitAlignmentAndCoalescing(t *testing.T) {
	a := dma.NewArena(4096)
	o1, _ := a.Alloc(100, 64)
	o2, _ := a.Alloc(100, 256)
	if o1 != 0 || o2 != 256 {
		t.Fatalf("offsets %d %d", o1, o2)
	}
	if _, err := a.Alloc(8192, 8); !errors.Is(err, dma.ErrNoMemory) {
		t.Fatalf("oversize: %v", err)
	}
	if _, err := a.Alloc(8, 3); !errors.Is(err, dma.ErrBadAlign) {
		t.Fatalf("bad align: %v", err)
	}
	if _, err := a.Alloc(0, 8); err == nil {
		t.Fatal("zero-size allocation")
	}
	if err := a.Release(o1); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(o1); !errors.Is(err, dma.ErrNotMapped) {
		t.Fatalf("double release: %v", err)
	}
	a.Release(o2)
	if a.Free() != 4096 {
		t.Fatalf("free %d after releasing everything", a.Free())
	}
	if o, _ := a.Alloc(4096, 4096); o != 0 {
		t.Fatal("free space not coalesced")
	}
}

// rec records cache maintenance.
type rec struct{ ops []string }

func (r *rec) Clean(s uintptr, n int)           { r.ops = append(r.ops, fmt.Sprintf("clean %d", n)) }
func (r *rec) Invalidate(s uintptr, n int)      { r.ops = append(r.ops, fmt.Sprintf("inv %d", n)) }
func (r *rec) CleanInvalidate(s uintptr, n int) { r.ops = append(r.ops, fmt.Sprintf("flush %d", n)) }
func (r *rec) Barrier()                         { r.ops = append(r.ops, "dsb") }

func TestSystemMaintainsTheCacheByDirection(t *testing.T) {
	ram := make([]byte, 1<<16)
	cached := make([]byte, 1<<14)
	coh := make([]byte, 1<<12)
	c := &rec{}
	lo := uintptr(0)
	s := dma.NewSystem(dma.SystemConfig{
		Cached:   dma.RegionConfig{Mem: cached, Base: 0x9000_0000},
		Coherent: dma.RegionConfig{Mem: coh, Base: 0x8800_0000},
		RAMStart: lo, RAMEnd: ^uintptr(0), Cache: c,
	})
	b, err := s.Alloc(100, 16, dma.Cached)
	if err != nil || b.Addr()%dma.CacheLine != 0 || b.Len() != 100 {
		t.Fatalf("alloc %v %v", b, err)
	}
	d, _ := s.Alloc(64, 64, dma.Coherent)
	if d.Addr() != 0x8800_0000 {
		t.Fatalf("coherent at %#x", d.Addr())
	}
	s.SyncForDevice(&b, 0, b.Len(), dma.ToDevice)
	s.SyncForDevice(&b, 0, b.Len(), dma.FromDevice)
	s.SyncForDevice(&b, 0, b.Len(), dma.Bidirectional)
	s.SyncForCPU(&b, 0, b.Len(), dma.ToDevice) // nothing to do
	s.SyncForCPU(&b, 0, b.Len(), dma.FromDevice)
	s.SyncForDevice(&d, 0, d.Len(), dma.ToDevice) // coherent: barrier only
	want := []string{"clean 100", "dsb", "inv 100", "dsb", "flush 100", "dsb", "inv 100", "dsb", "dsb"}
	if fmt.Sprint(c.ops) != fmt.Sprint(want) {
		t.Fatalf("ops %v\nwant %v", c.ops, want)
	}
	var m dma.Buffer
	err = s.Map(&m, ram[3:50], dma.ToDevice)
	if err != nil || m.Len() != 47 {
		t.Fatal(err)
	}
	if err := s.Unmap(&m, dma.ToDevice); err != nil {
		t.Fatal(err)
	}
	if err := s.Unmap(&b, dma.ToDevice); err == nil {
		t.Fatal("unmapped an allocation")
	}
	if err := s.Map(new(dma.Buffer), nil, dma.ToDevice); err == nil {
		t.Fatal("mapped nothing")
	}
	if err := s.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Free(d); err != nil {
		t.Fatal(err)
	}
	if err := s.Free(m); err == nil {
		t.Fatal("freed a mapping")
	}
	if err := s.Free(b); err == nil {
		t.Fatal("double free")
	}
	if _, err := s.Alloc(1<<20, 64, dma.Cached); !errors.Is(err, dma.ErrNoMemory) {
		t.Fatalf("exhaustion: %v", err)
	}
	s.Barrier()
	// A Cached region the MMU maps uncached: its buffers get barriers
	// only, memory mapped from RAM is still maintained.
	c.ops = nil
	u := dma.NewSystem(dma.SystemConfig{
		Cached:   dma.RegionConfig{Mem: cached, Base: 0x9000_0000, Uncached: true},
		RAMStart: lo, RAMEnd: ^uintptr(0), Cache: c,
	})
	ub, err := u.Alloc(100, 16, dma.Cached)
	if err != nil {
		t.Fatal(err)
	}
	u.SyncForDevice(&ub, 0, ub.Len(), dma.ToDevice)
	u.SyncForCPU(&ub, 0, ub.Len(), dma.FromDevice)
	var um dma.Buffer
	err = u.Map(&um, ram[3:50], dma.ToDevice)
	if err != nil {
		t.Fatal(err)
	}
	u.SyncForCPU(&um, 0, um.Len(), dma.FromDevice)
	if want := []string{"dsb", "clean 47", "dsb", "inv 47", "dsb"}; fmt.Sprint(c.ops) != fmt.Sprint(want) {
		t.Fatalf("uncached region ops %v\nwant %v", c.ops, want)
	}
	narrow := dma.NewSystem(dma.SystemConfig{RAMStart: 1, RAMEnd: 2})
	if err := narrow.Map(new(dma.Buffer), ram, dma.ToDevice); !errors.Is(err, dma.ErrUnreadable) {
		t.Fatalf("map outside RAM: %v", err)
	}
}

func TestBufferHelpers(t *testing.T) {
	b := dma.MakeBuffer(make([]byte, 128), 0x1000, 7)
	s := b.Slice(64, 32)
	if s.Addr() != 0x1040 || s.Len() != 32 || s.Tag() != 7 || !s.Valid() || new(dma.Buffer).Valid() {
		t.Fatalf("slice %v", s)
	}
	if st, n := dma.LineSpan(0x1010, 0x40); st != 0x1000 || n != 0x80 {
		t.Fatalf("LineSpan %#x %d", st, n)
	}
	if dma.AlignUp(65, 64) != 128 || dma.Misalignment(nil, 16) != 0 {
		t.Fatal("helpers")
	}
	for d, s := range map[dma.Dir]string{dma.ToDevice: "to-device", dma.FromDevice: "from-device", dma.Bidirectional: "bidirectional", 9: "Dir(9)"} {
		if d.String() != s {
			t.Fatal(d.String())
		}
	}
}

// regs is a fake PL310 register file.
type regs struct {
	writes []string
	busy   int
}

func (r *regs) Read32(off uint32) uint32 {
	if off == dma.PL310_CACHE_SYNC && r.busy > 0 {
		r.busy--
		return 1
	}
	return 0
}
func (r *regs) Write32(off, v uint32) { r.writes = append(r.writes, fmt.Sprintf("%#x=%#x", off, v)) }

func TestPL310LineOperations(t *testing.T) {
	r := &regs{busy: 2}
	p := &dma.PL310{Regs: r}
	p.Clean(0x1010, 0x30)      // lines 0x1000, 0x1020
	p.Invalidate(0x2010, 0x40) // partial both ends: flush 0x2000 and 0x2040, invalidate 0x2020
	p.CleanInvalidate(0x3000, 32)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	want := "[0x7b0=0x1000 0x7b0=0x1020 0x7f0=0x2000 0x7f0=0x2040 0x770=0x2020 0x7f0=0x3000 0x730=0x0]"
	if fmt.Sprint(r.writes) != want {
		t.Fatalf("writes %v\nwant %s", r.writes, want)
	}
	r.busy = 1 << 30
	p.SyncPolls = 10
	if err := p.Sync(); err == nil {
		t.Fatal("stuck cache sync not reported")
	}
}
