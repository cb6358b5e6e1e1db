// Package dmatest is a host model of DMA memory behind a non-coherent data
// cache. It implements dma.Memory for drivers and a device-side interface for
// device models, and reports every violation of the DMA ownership protocol
// that a real cache would turn into silent corruption, in the spirit of
// Linux's CONFIG_DMA_API_DEBUG.
//
// The model keeps two copies of cached memory: the CPU view (what the driver
// reads and writes, standing for the cache) and RAM (what the device reads and
// writes). A clean copies CPU lines to RAM; an invalidate copies RAM lines to
// the CPU view. A driver that forgets either therefore moves stale bytes, and
// the model also says so, naming the buffer, the offset, and the call site of
// the last ownership change. Coherent allocations have one copy.
//
// Violations detected:
//   - StaleDeviceRead: the device reads bytes the CPU changed after the last
//     clean (a missing clean, or a buffer reused while the device owns it);
//   - CPUOwned: the device touches memory never handed to it;
//   - StaleCPURead: device-written bytes taken back by the CPU without an
//     invalidate (found when the line is handed back, cleaned or freed);
//   - FreeWhileDevice: memory freed while the device owns it;
//   - BadAddress: a device address outside every allocation and mapping;
//   - SharedLine: a from-device range that does not cover whole cache lines,
//     so invalidating it would corrupt a neighbour;
//   - BadBuffer: a sync or free of memory this model did not hand out.
package dmatest

import (
	"fmt"
	"runtime"
	"sort"
	"sync"

	"github.com/tamanic/tamanic/dma"
)

// Kind classifies a violation.
type Kind int

// Violation kinds; see the package comment.
const (
	StaleDeviceRead Kind = iota + 1
	CPUOwned
	StaleCPURead
	FreeWhileDevice
	BadAddress
	SharedLine
	BadBuffer
)

var kindNames = map[Kind]string{
	StaleDeviceRead: "device read bytes the CPU changed after the last clean",
	CPUOwned:        "device accessed memory the CPU owns",
	StaleCPURead:    "CPU took back device-written bytes without invalidating",
	FreeWhileDevice: "memory freed while the device owns it",
	BadAddress:      "device address outside every allocation and mapping",
	SharedLine:      "from-device range shares a cache line with other data",
	BadBuffer:       "sync of memory this model did not hand out",
}

func (k Kind) String() string { return kindNames[k] }

// Violation is one protocol violation.
type Violation struct {
	Kind   Kind
	Area   string   // which allocation or mapping
	Addr   dma.Addr // device address of the first offending byte
	Offset int      // offset of that byte within the area
	Site   string   // call site of the last ownership change of the line
	Where  string   // call site that detected it
}

func (v Violation) String() string {
	return fmt.Sprintf("dma violation: %v: %s offset %d (addr %#x); last handed over at %s; detected at %s",
		v.Kind, v.Area, v.Offset, v.Addr, v.Site, v.Where)
}

// Options configures a Memory.
type Options struct {
	// CachedSize and CoherentSize size the two regions (default 16 MiB and
	// 1 MiB).
	CachedSize, CoherentSize int
	// MapSlots bounds concurrent mappings (default 4096); MapMax bounds one
	// mapping's length (default 120 KiB).
	MapSlots, MapMax int
	// NoTrace skips recording call sites (for benchmarks).
	NoTrace bool
}

// Device address layout of the model. All of it fits in 32 bits, as the
// ENET's descriptors require.
const (
	CoherentBase dma.Addr = 0x8800_0000
	CachedBase   dma.Addr = 0x9000_0000
	MapBase      dma.Addr = 0xC000_0000
	mapStride             = 0x20000
)

const (
	tagCached   = 1
	tagCoherent = 2
	tagMapBase  = 16
)

type line struct {
	dev     bool    // the device owns the line
	written bool    // the device wrote it and the CPU has not invalidated since
	site    uintptr // PC of the last ownership change
}

type region struct {
	cpu, ram []byte // ram is nil for coherent memory
	base     dma.Addr
	arena    *dma.Arena
	lines    []line
	allocs   []span // sorted by offset; padded sizes
}

type span struct{ off, n int }

// find returns the allocation holding [off, off+n), if any.
func (r *region) find(off, n int) (span, bool) {
	i := sort.Search(len(r.allocs), func(i int) bool { return r.allocs[i].off > off }) - 1
	if i < 0 || off+n > r.allocs[i].off+r.allocs[i].n {
		return span{}, false
	}
	return r.allocs[i], true
}

func (r *region) add(s span) {
	i := sort.Search(len(r.allocs), func(i int) bool { return r.allocs[i].off > s.off })
	r.allocs = append(r.allocs, span{})
	copy(r.allocs[i+1:], r.allocs[i:])
	r.allocs[i] = s
}

func (r *region) remove(off int) {
	i := sort.Search(len(r.allocs), func(i int) bool { return r.allocs[i].off >= off })
	if i < len(r.allocs) && r.allocs[i].off == off {
		r.allocs = append(r.allocs[:i], r.allocs[i+1:]...)
	}
}

type mapping struct {
	live   bool
	cpu    []byte
	shadow []byte
	addr   dma.Addr
	dir    dma.Dir
	site   uintptr
}

// Counters are totals of cache maintenance done through the model.
type Counters struct {
	Cleaned, Invalidated int // bytes, rounded out to cache lines
	Barriers, Maps       int
}

// Memory is the host model. It is safe for concurrent use.
type Memory struct {
	mu       sync.Mutex
	opts     Options
	cached   region
	coherent region
	maps     []mapping
	free     []int
	viol     []Violation
	counters Counters
}

// TB is the part of testing.TB the model uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
}

// New returns a Memory. When t is not nil, violations still unclaimed by
// Take when the test ends fail it.
func New(t TB, opts Options) *Memory {
	if opts.CachedSize == 0 {
		opts.CachedSize = 16 << 20
	}
	if opts.CoherentSize == 0 {
		opts.CoherentSize = 1 << 20
	}
	if opts.MapSlots == 0 {
		opts.MapSlots = 4096
	}
	if opts.MapMax == 0 {
		opts.MapMax = 120 << 10
	}
	m := &Memory{opts: opts}
	m.cached = region{cpu: aligned(opts.CachedSize), ram: make([]byte, opts.CachedSize), base: CachedBase,
		arena: dma.NewArena(opts.CachedSize), lines: make([]line, opts.CachedSize/dma.CacheLine)}
	m.coherent = region{cpu: aligned(opts.CoherentSize), base: CoherentBase, arena: dma.NewArena(opts.CoherentSize)}
	m.maps = make([]mapping, opts.MapSlots)
	for i := opts.MapSlots - 1; i >= 0; i-- {
		m.free = append(m.free, i)
	}
	if t != nil {
		t.Cleanup(func() {
			t.Helper()
			for _, v := range m.Take() {
				t.Errorf("%v", v)
			}
		})
	}
	return m
}

// aligned returns a zeroed slice of n bytes starting on a 4 KiB boundary, so
// CPU and device addresses agree in their low 12 bits.
func aligned(n int) []byte {
	b := make([]byte, n+4096)
	off := dma.Misalignment(b, 4096)
	if off != 0 {
		off = 4096 - off
	}
	return b[off : off+n : off+n]
}

// Take returns and forgets the violations recorded so far.
func (m *Memory) Take() []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.viol
	m.viol = nil
	return v
}

// Counters returns the maintenance totals.
func (m *Memory) Counters() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counters
}

// LiveMappings returns one line per mapping not yet unmapped (a leak once
// all traffic has completed).
func (m *Memory) LiveMappings() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i := range m.maps {
		if mp := &m.maps[i]; mp.live {
			out = append(out, fmt.Sprintf("mapping %#x+%d (%v) from %s", mp.addr, len(mp.cpu), mp.dir, site(mp.site)))
		}
	}
	return out
}

func (m *Memory) caller() uintptr {
	if m.opts.NoTrace {
		return 0
	}
	var pc [1]uintptr
	// 0 Callers, 1 caller, 2 Memory method, 3 its caller.
	if runtime.Callers(3, pc[:]) == 0 {
		return 0
	}
	return pc[0]
}

func site(pc uintptr) string {
	if pc == 0 {
		return "(untraced)"
	}
	f := runtime.FuncForPC(pc - 1)
	if f == nil {
		return fmt.Sprintf("pc %#x", pc)
	}
	file, ln := f.FileLine(pc - 1)
	return fmt.Sprintf("%s (%s:%d)", f.Name(), file, ln)
}

func where() string {
	// Skip runtime.Callers, where, report, the model method: name the caller
	// of the model (the driver or the device model).
	var pcs [8]uintptr
	n := runtime.Callers(4, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !more || !isSelf(f.Function) {
			return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
		}
	}
}

func isSelf(fn string) bool {
	const p = "github.com/tamanic/tamanic/dma/dmatest."
	return len(fn) > len(p) && fn[:len(p)] == p
}

func (m *Memory) report(k Kind, area string, addr dma.Addr, off int, pc uintptr) {
	m.viol = append(m.viol, Violation{Kind: k, Area: area, Addr: addr, Offset: off, Site: site(pc), Where: where()})
}

// Alloc implements dma.Memory.
func (m *Memory) Alloc(size, align int, attr dma.Attr) (dma.Buffer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, tag := &m.cached, uint32(tagCached)
	n := dma.AlignUp(size, dma.CacheLine)
	if attr == dma.Coherent {
		r, tag, n = &m.coherent, tagCoherent, size
	} else if align < dma.CacheLine {
		align = dma.CacheLine
	}
	off, err := r.arena.Alloc(n, align)
	if err != nil {
		return dma.Buffer{}, fmt.Errorf("dmatest: alloc %d bytes: %w", size, err)
	}
	if r.ram != nil {
		for i := off / dma.CacheLine; i < (off+n)/dma.CacheLine; i++ {
			r.lines[i] = line{}
		}
	}
	r.add(span{off, n})
	return dma.MakeBuffer(r.cpu[off:off+size:off+size], r.base+dma.Addr(off), tag), nil
}

// Free implements dma.Memory.
func (m *Memory) Free(b dma.Buffer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.regionOf(b)
	if r == nil {
		m.report(BadBuffer, "free", b.Addr(), 0, 0)
		return fmt.Errorf("dmatest: free %#x: %w", b.Addr(), dma.ErrNotMapped)
	}
	off := int(b.Addr() - r.base)
	n := r.arena.SizeOf(off)
	if n == 0 {
		m.report(BadBuffer, "free", b.Addr(), 0, 0)
		return fmt.Errorf("dmatest: free %#x: %w", b.Addr(), dma.ErrNotMapped)
	}
	if r.ram != nil {
		for i := off / dma.CacheLine; i < (off+n)/dma.CacheLine; i++ {
			l := &r.lines[i]
			if l.dev {
				m.report(FreeWhileDevice, m.areaName(r, i*dma.CacheLine), r.base+dma.Addr(i*dma.CacheLine), i*dma.CacheLine-off, l.site)
				break
			}
			if l.written {
				m.report(StaleCPURead, m.areaName(r, i*dma.CacheLine), r.base+dma.Addr(i*dma.CacheLine), i*dma.CacheLine-off, l.site)
				break
			}
		}
	}
	r.remove(off)
	return r.arena.Release(off)
}

func (m *Memory) regionOf(b dma.Buffer) *region {
	switch b.Tag() {
	case tagCached:
		return &m.cached
	case tagCoherent:
		return &m.coherent
	}
	return nil
}

func (m *Memory) areaName(r *region, off int) string {
	kind := "cached"
	if r.ram == nil {
		kind = "coherent"
	}
	return fmt.Sprintf("%s memory %#x", kind, r.base+dma.Addr(off))
}

// Map implements dma.Memory.
func (m *Memory) Map(b *dma.Buffer, p []byte, dir dma.Dir) error {
	pc := m.caller()
	m.mu.Lock()
	defer m.mu.Unlock()
	*b = dma.Buffer{}
	if len(p) == 0 || len(p) > m.opts.MapMax {
		return fmt.Errorf("dmatest: map of %d bytes (max %d)", len(p), m.opts.MapMax)
	}
	if len(m.free) == 0 {
		return fmt.Errorf("dmatest: map: all %d mapping slots in use: %w", len(m.maps), dma.ErrNoMemory)
	}
	slot := m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	mp := &m.maps[slot]
	mp.live, mp.cpu, mp.dir, mp.site = true, p, dir, pc
	if cap(mp.shadow) < len(p) {
		mp.shadow = make([]byte, len(p), max(len(p), 2048))
	}
	mp.shadow = mp.shadow[:len(p)]
	copy(mp.shadow, p) // the clean (and, from-device, the invalidate's write-back)
	mp.addr = MapBase + dma.Addr(slot)*mapStride + dma.Addr(dma.Misalignment(p, 4096))
	m.counters.Maps++
	_, n := dma.LineSpan(mp.addr, len(p))
	m.counters.Cleaned += n
	*b = dma.MakeBuffer(p, mp.addr, uint32(tagMapBase+slot))
	return nil
}

// Unmap implements dma.Memory.
func (m *Memory) Unmap(bp *dma.Buffer, dir dma.Dir) error {
	b := *bp
	m.mu.Lock()
	defer m.mu.Unlock()
	slot := int(b.Tag()) - tagMapBase
	if slot < 0 || slot >= len(m.maps) || !m.maps[slot].live || m.maps[slot].addr != b.Addr() {
		m.report(BadBuffer, "unmap", b.Addr(), 0, 0)
		return fmt.Errorf("dmatest: unmap %#x: %w", b.Addr(), dma.ErrNotMapped)
	}
	mp := &m.maps[slot]
	if dir&dma.FromDevice != 0 {
		copy(mp.cpu, mp.shadow)
		_, n := dma.LineSpan(mp.addr, len(mp.cpu))
		m.counters.Invalidated += n
	}
	mp.live, mp.cpu = false, nil
	m.free = append(m.free, slot)
	return nil
}

var _ dma.Memory = (*Memory)(nil)
