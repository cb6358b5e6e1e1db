package dmatest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/dma"
)

func kinds(vs []Violation) []Kind {
	var k []Kind
	for _, v := range vs {
		k = append(k, v.Kind)
	}
	return k
}

func wantOne(t *testing.T, m *Memory, k Kind) Violation {
	t.Helper()
	vs := m.Take()
	if len(vs) != 1 || vs[0].Kind != k {
		t.Fatalf("violations = %v, want exactly one %v", kinds(vs), k)
	}
	return vs[0]
}

func TestCorrectSequencesAreSilent(t *testing.T) {
	m := New(t, Options{})
	tx, _ := m.Alloc(256, 64, dma.Cached)
	copy(tx.Bytes(), "hello device")
	m.SyncForDevice(&tx, 0, tx.Len(), dma.ToDevice)
	got := make([]byte, 12)
	if err := m.DeviceRead(tx.Addr(), got); err != nil || string(got) != "hello device" {
		t.Fatalf("device read %q, %v", got, err)
	}
	m.SyncForCPU(&tx, 0, tx.Len(), dma.ToDevice)

	rx, _ := m.Alloc(1536, 64, dma.Cached)
	m.SyncForDevice(&rx, 0, rx.Len(), dma.FromDevice)
	if err := m.DeviceWrite(rx.Addr()+2, []byte("frame")); err != nil {
		t.Fatal(err)
	}
	m.SyncForCPU(&rx, 0, 64, dma.FromDevice)
	if !bytes.Equal(rx.Bytes()[2:7], []byte("frame")) {
		t.Fatalf("cpu sees %q after invalidate", rx.Bytes()[2:7])
	}
	m.SyncForDevice(&rx, 0, 64, dma.FromDevice)
	m.SyncForCPU(&rx, 0, rx.Len(), dma.FromDevice)
	if err := m.Free(rx); err != nil {
		t.Fatal(err)
	}
	heap := []byte("payload on the heap")
	var mb dma.Buffer
	err := m.Map(&mb, heap[3:], dma.ToDevice)
	if err != nil {
		t.Fatal(err)
	}
	if mb.Addr()&0xFFF != dma.Addr(dma.Misalignment(heap[3:], 4096)) {
		t.Fatalf("mapping lost the low address bits: %#x", mb.Addr())
	}
	got = make([]byte, len(heap)-3)
	if err := m.DeviceRead(mb.Addr(), got); err != nil || string(got) != "load on the heap" {
		t.Fatalf("mapped read %q %v", got, err)
	}
	if err := m.Unmap(&mb, dma.ToDevice); err != nil {
		t.Fatal(err)
	}
	if l := m.LiveMappings(); len(l) != 0 {
		t.Fatalf("live mappings: %v", l)
	}
	if vs := m.Take(); len(vs) != 0 {
		t.Fatalf("unexpected violations: %v", vs)
	}
}

func TestMissingCleanIsCaught(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(128, 64, dma.Cached)
	m.SyncForDevice(&b, 0, b.Len(), dma.ToDevice)
	copy(b.Bytes()[70:], "late write") // after the clean
	got := make([]byte, 128)
	_ = m.DeviceRead(b.Addr(), got)
	v := wantOne(t, m, StaleDeviceRead)
	if v.Offset != 70 || !strings.Contains(v.Site, "TestMissingCleanIsCaught") {
		t.Fatalf("violation does not name offset and site: %v", v)
	}
	if bytes.Contains(got, []byte("late")) {
		t.Fatal("device saw bytes that never left the cache")
	}
}

func TestDeviceTouchingCPUMemoryIsCaught(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(64, 64, dma.Cached)
	_ = m.DeviceWrite(b.Addr(), []byte{1})
	wantOne(t, m, CPUOwned)
}

func TestMissingInvalidateIsCaught(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(256, 64, dma.Cached)
	m.SyncForDevice(&b, 0, b.Len(), dma.FromDevice)
	_ = m.DeviceWrite(b.Addr()+64, []byte("new data"))
	if bytes.Contains(b.Bytes(), []byte("new")) {
		t.Fatal("CPU view changed without an invalidate")
	}
	// The driver "reads" and reposts without invalidating.
	m.SyncForDevice(&b, 0, b.Len(), dma.FromDevice)
	v := wantOne(t, m, StaleCPURead)
	if v.Offset != 64 {
		t.Fatalf("offset %d, want 64", v.Offset)
	}
	// Taking it back with the wrong direction is no better.
	_ = m.DeviceWrite(b.Addr(), []byte("x"))
	m.SyncForCPU(&b, 0, b.Len(), dma.ToDevice)
	wantOne(t, m, StaleCPURead)
}

func TestFreeWhileDeviceOwnsIsCaught(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(64, 64, dma.Cached)
	m.SyncForDevice(&b, 0, b.Len(), dma.FromDevice)
	_ = m.Free(b)
	wantOne(t, m, FreeWhileDevice)
}

func TestBadAddressesAreCaught(t *testing.T) {
	m := New(t, Options{})
	if err := m.DeviceRead(0x1000, make([]byte, 4)); err == nil {
		t.Fatal("read of unmapped address succeeded")
	}
	wantOne(t, m, BadAddress)
	heap := make([]byte, 100)
	var mb dma.Buffer
	_ = m.Map(&mb, heap, dma.ToDevice)
	_ = m.Unmap(&mb, dma.ToDevice)
	_ = m.DeviceRead(mb.Addr(), make([]byte, 4))
	wantOne(t, m, BadAddress) // use after unmap
	b, _ := m.Alloc(64, 64, dma.Cached)
	m.SyncForDevice(&b, 0, b.Len(), dma.ToDevice)
	_ = m.DeviceRead(b.Addr()+60, make([]byte, 8)) // runs past the allocation
	wantOne(t, m, BadAddress)
}

func TestMappedBufferReusedInFlightIsCaught(t *testing.T) {
	m := New(t, Options{})
	heap := []byte("0123456789")
	var mb dma.Buffer
	_ = m.Map(&mb, heap, dma.ToDevice)
	heap[5] = 'X' // the stack rewrote the payload before completion
	_ = m.DeviceRead(mb.Addr(), make([]byte, 10))
	if v := wantOne(t, m, StaleDeviceRead); v.Offset != 5 {
		t.Fatalf("offset %d", v.Offset)
	}
	_ = m.Unmap(&mb, dma.ToDevice)
}

func TestPartialLineInvalidateIsCaught(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(256, 64, dma.Cached)
	m.SyncForDevice(&b, 8, 64, dma.FromDevice)
	wantOne(t, m, SharedLine)
}

func TestCoherentNeedsNoMaintenance(t *testing.T) {
	m := New(t, Options{})
	d, _ := m.Alloc(64, 64, dma.Coherent)
	d.Bytes()[3] = 7
	v, err := m.Coherent(d.Addr(), 8)
	if err != nil || v[3] != 7 {
		t.Fatalf("coherent view %v %v", v, err)
	}
	if _, err := m.Coherent(CachedBase, 8); err == nil {
		t.Fatal("cached memory served as coherent")
	}
	wantOne(t, m, BadAddress)
}

func TestMappingSlotsExhaust(t *testing.T) {
	m := New(t, Options{MapSlots: 2})
	p := make([]byte, 8)
	var a dma.Buffer
	_ = m.Map(&a, p, dma.ToDevice)
	var b dma.Buffer
	_ = m.Map(&b, p, dma.ToDevice)
	if err := m.Map(new(dma.Buffer), p, dma.ToDevice); err == nil {
		t.Fatal("third mapping succeeded with two slots")
	}
	_ = m.Unmap(&a, dma.ToDevice)
	_ = m.Unmap(&b, dma.ToDevice)
	if err := m.Unmap(&b, dma.ToDevice); err == nil {
		t.Fatal("double unmap succeeded")
	}
	wantOne(t, m, BadBuffer)
}

func TestFromDeviceMappingsAndTheirSyncs(t *testing.T) {
	m := New(t, Options{})
	heap := make([]byte, 300)
	var mb dma.Buffer
	err := m.Map(&mb, heap, dma.FromDevice)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeviceWrite(mb.Addr()+10, []byte("from the wire")); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(heap, []byte("wire")) {
		t.Fatal("device write visible before unmap")
	}
	m.SyncForCPU(&mb, 0, 64, dma.FromDevice) // partial sync of a mapping
	if !bytes.Contains(heap, []byte("wire")) {
		t.Fatal("sync-for-cpu of a mapping did not copy")
	}
	copy(heap[100:], "cpu bytes")
	m.SyncForDevice(&mb, 100, 9, dma.ToDevice)
	got := make([]byte, 9)
	_ = m.DeviceRead(mb.Addr()+100, got) // from-device mapping read: a violation
	if string(got) != "cpu bytes" {
		t.Fatalf("device read %q", got)
	}
	wantOne(t, m, CPUOwned)
	forged := dma.MakeBuffer(heap[:8], mb.Addr()+4000, mb.Tag())
	m.SyncForDevice(&forged, 0, forged.Len(), dma.ToDevice)
	wantOne(t, m, BadBuffer)
	// A range outside the Buffer: maintenance of bytes the caller does not
	// own, reported whatever the Buffer is.
	m.SyncForDevice(&mb, 4000, 200, dma.ToDevice)
	wantOne(t, m, BadBuffer)
	m.SyncForCPU(&mb, -1, 8, dma.FromDevice)
	wantOne(t, m, BadBuffer)
	if err := m.Unmap(&mb, dma.FromDevice); err != nil {
		t.Fatal(err)
	}
	m.SyncForCPU(&mb, 0, mb.Len(), dma.FromDevice) // after unmap
	wantOne(t, m, BadBuffer)
	var to dma.Buffer
	_ = m.Map(&to, make([]byte, 16), dma.ToDevice)
	_ = m.DeviceWrite(to.Addr(), []byte{1})
	wantOne(t, m, CPUOwned)
	m.Unmap(&to, dma.ToDevice)
	if c := m.Counters(); c.Maps != 2 || c.Cleaned == 0 || c.Invalidated == 0 {
		t.Fatalf("counters %+v", c)
	}
}

func TestBidirectionalAndForeignBuffers(t *testing.T) {
	m := New(t, Options{})
	b, _ := m.Alloc(128, 64, dma.Cached)
	copy(b.Bytes(), "both ways")
	m.SyncForDevice(&b, 0, b.Len(), dma.Bidirectional)
	_ = m.DeviceWrite(b.Addr()+64, []byte("reply"))
	got := make([]byte, 9)
	_ = m.DeviceRead(b.Addr(), got)
	m.SyncForCPU(&b, 0, b.Len(), dma.Bidirectional)
	if string(got) != "both ways" || !bytes.Contains(b.Bytes(), []byte("reply")) {
		t.Fatalf("bidirectional: %q %q", got, b.Bytes())
	}
	foreign := dma.MakeBuffer(make([]byte, 8), 0x1234, 99)
	m.SyncForDevice(&foreign, 0, foreign.Len(), dma.ToDevice)
	wantOne(t, m, BadBuffer)
	m.SyncForCPU(&foreign, 0, foreign.Len(), dma.ToDevice)
	wantOne(t, m, BadBuffer)
	if err := m.Free(foreign); err == nil {
		t.Fatal("freed a foreign buffer")
	}
	wantOne(t, m, BadBuffer)
	if err := m.Free(dma.MakeBuffer(b.Bytes()[64:], b.Addr()+64, b.Tag())); err == nil {
		t.Fatal("freed the middle of an allocation")
	}
	wantOne(t, m, BadBuffer)
	_ = m.DeviceWrite(0x10, []byte{1})
	wantOne(t, m, BadAddress)
	// A line the device wrote, freed without an invalidate.
	m.SyncForDevice(&b, 0, b.Len(), dma.FromDevice)
	_ = m.DeviceWrite(b.Addr(), []byte{1})
	m.SyncForCPU(&b, 64, 64, dma.FromDevice)
	if err := m.Free(b); err != nil {
		t.Fatal(err)
	}
	if vs := m.Take(); len(vs) != 1 || vs[0].Kind != FreeWhileDevice {
		t.Fatalf("violations %v", kinds(vs))
	}
	c, _ := m.Alloc(64, 64, dma.Coherent)
	m.SyncForDevice(&c, 0, c.Len(), dma.ToDevice) // coherent: nothing to do, nothing wrong
	m.SyncForCPU(&c, 0, c.Len(), dma.FromDevice)
	if err := m.Free(c); err != nil {
		t.Fatal(err)
	}
}

func TestViolationsReadWell(t *testing.T) {
	v := Violation{Kind: StaleDeviceRead, Area: "cached memory 0x90000000", Addr: 0x90000040, Offset: 64, Site: "x", Where: "y"}
	s := v.String()
	for _, want := range []string{"CPU changed", "offset 64", "0x90000040", "handed over at x", "detected at y"} {
		if !strings.Contains(s, want) {
			t.Fatalf("%q lacks %q", s, want)
		}
	}
	for k := StaleDeviceRead; k <= BadBuffer; k++ {
		if k.String() == "" {
			t.Fatalf("kind %d unnamed", k)
		}
	}
}
