package connectxtest

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// memRegs is a BAR that is plain memory: the driver's stores land there
// and nothing else happens, as with an emulator's ivshmem BAR.
type memRegs []byte

func (r memRegs) Read32(off uint32) uint32 {
	var t [4]byte
	binary.NativeEndian.PutUint32(t[:], atomic.LoadUint32((*uint32)(unsafe.Pointer(&r[off]))))
	return binary.LittleEndian.Uint32(t[:])
}

func (r memRegs) Write32(off, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r[off])), native(v))
}

// sharedRig runs a Shared poller in a goroutine until cleanup.
func sharedRig(t *testing.T, o Options) (*Model, memRegs, *dmatest.Memory, *[]string, *sync.Mutex) {
	t.Helper()
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	o.Mem = mem
	m := New(o)
	words := make([]uint64, barSize/8)
	bar := memRegs(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), barSize))
	s, err := NewShared(m, bar)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var viol []string
	s.OnViolation = func(v string) { mu.Lock(); viol = append(viol, v); mu.Unlock() }
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !s.Poll() {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return m, bar, mem, &viol, &mu
}

func udpFrame(dst, src [6]byte, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f, dst[:])
	copy(f[6:], src[:])
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	copy(ip[12:], []byte{10, 0, 3, 2, 10, 0, 3, 1})
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
	binary.BigEndian.PutUint16(ip[20:], 4000)
	binary.BigEndian.PutUint16(ip[22:], 4001)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+len(payload)))
	copy(ip[28:], payload)
	return f
}

// TestSharedBAR brings the driver up on a BAR it reaches only by loads and
// stores (the model learning its writes by polling), moves a frame each
// way and tears down, with no violation.
func TestSharedBAR(t *testing.T) {
	m, bar, mem, viol, mu := sharedRig(t, Options{MAC: [6]byte{2, 0xC7, 0, 0, 0, 9}})
	var wire [][]byte
	var wmu sync.Mutex
	m.SetPeer(func(f []byte) { wmu.Lock(); wire = append(wire, f); wmu.Unlock() })
	// The model learns the driver's stores by polling the shared BAR in
	// another goroutine; under -race on a loaded 2-core machine one command
	// once took over the default 5 s. The timeouts only guard against a
	// hang here: nothing is asserted about time.
	nic, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: bar, Mem: mem,
		Sleep:      func() { time.Sleep(10 * time.Microsecond) },
		CmdTimeout: 2 * time.Minute, BringUpCmdTimeout: 2 * time.Minute, FirmwareTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("Open over the shared BAR: %v", err)
	}
	var done atomic.Int32
	nic.SetTxDone(func(any, error) { done.Add(1) })
	out := udpFrame([6]byte{2, 0, 0, 0, 0, 1}, nic.MAC(), bytes.Repeat([]byte("tx"), 300))
	if err := nic.Transmit([][]byte{out[:40], out[40:]}, true, nil); err != nil {
		t.Fatal(err)
	}
	in := udpFrame(nic.MAC(), [6]byte{2, 0, 0, 0, 0, 1}, bytes.Repeat([]byte("rx"), 200))
	delivered := false
	var got []byte
	for i := 0; i < 100000 && (done.Load() == 0 || got == nil); i++ {
		nic.Poll()
		if !delivered {
			delivered = m.Deliver(in)
		}
		if f, err := nic.Receive(); err != nil {
			t.Fatal(err)
		} else if f != nil {
			got = append([]byte(nil), f.Bytes()...)
			if err := f.(*connectx.Frame).Release(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Microsecond)
	}
	if done.Load() != 1 || !bytes.Equal(got, in) {
		t.Fatalf("completions %d, received %d bytes (want %d)", done.Load(), len(got), len(in))
	}
	wmu.Lock()
	if len(wire) != 1 || !bytes.Equal(wire[0][:20], out[:20]) || len(wire[0]) != len(out) {
		t.Fatalf("wire %d frames", len(wire))
	}
	wmu.Unlock()
	if err := nic.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*viol) != 0 {
		t.Fatalf("violations: %q", *viol)
	}
	if st := m.State(); st.Enabled || st.Pages != 0 || st.Objects != 0 {
		t.Fatalf("function left %+v", st)
	}
}

// TestSharedDoorbellViolation: a send doorbell naming an SQ that does not
// exist is reported through OnViolation.
func TestSharedDoorbellViolation(t *testing.T) {
	m, bar, mem, viol, mu := sharedRig(t, Options{})
	nic, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: bar, Mem: mem,
		Sleep: func() { time.Sleep(10 * time.Microsecond) }})
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	m.mu.Lock()
	var page uint32
	for p := range m.uars {
		page = p
	}
	m.mu.Unlock()
	bar.Write32(page*4096+0x900, 0x01000000)
	bar.Write32(page*4096+0x904, 0x00FFEE01) // SQ 0xFFEE
	for i := 0; i < 10000; i++ {
		mu.Lock()
		n := len(*viol)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*viol) == 0 || !strings.Contains((*viol)[0], "not bound") {
		t.Fatalf("violations %q", *viol)
	}
	*viol = nil
}

func TestFileMemoryBounds(t *testing.T) {
	var faults []string
	f := &FileMemory{Mem: make([]byte, 8192), Base: 0x80000000, OnFault: func(s string) { faults = append(faults, s) }}
	if err := f.DeviceWrite(0x80000000+8190, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	if err := f.DeviceRead(0x80000000+8190, b[:]); err != nil || b != [2]byte{1, 2} {
		t.Fatalf("read %v %v", b, err)
	}
	for _, a := range []dma.Addr{0x80000000 + 8191, 0x7FFFFFFF, 0} {
		if err := f.DeviceRead(a, b[:]); err == nil {
			t.Errorf("read at %#x accepted", a)
		}
	}
	if _, err := f.Coherent(0x80000002, 4); err == nil {
		t.Error("unaligned shared word accepted")
	}
	if len(faults) != 4 {
		t.Fatalf("faults %q", faults)
	}
}

// tornRegs runs polls between the two stores of every send doorbell (as
// a poller does when the driver is descheduled there, however long): the
// polls see the new first word beside the previous second word.
// After the second store of every other doorbell it polls once more, so
// that some doorbells are taken whole and some are followed by the next.
// drop lists the doorbells (counting from 1) whose second store it drops,
// as a driver that never makes it would.
type tornRegs struct {
	memRegs
	poll func() bool
	torn *atomic.Int32
	drop []int32
}

func (r tornRegs) Write32(off, v uint32) {
	if off >= 4096 && (off%4096 == 0x804 || off%4096 == 0x904) {
		n := r.torn.Load()
		if slices.Contains(r.drop, n) {
			return
		}
		r.memRegs.Write32(off, v)
		if n%2 == 0 {
			r.poll()
		}
		return
	}
	r.memRegs.Write32(off, v)
	if off >= 4096 && (off%4096 == 0x800 || off%4096 == 0x900) {
		r.torn.Add(1)
		for range 3 {
			r.poll()
		}
	}
}

// TestSharedTornDoorbell: polls that fall between the two stores of a
// send doorbell (the second word changing: 2, then 3 data segments) take
// the doorbell whole once its second word lands, however late, without a
// violation. Before Shared waited for the second word, this reported
// "doorbell bytes ... differ from WQE"; when it waited at most 20 ms, it
// did so whenever the driver's second store came later (under load).
// tornRig opens a driver on a Shared BAR through tornRegs (dropping the
// second store of the doorbells in drop); it returns the driver, the
// Shared, its poll (one poller at a time, as in tamanic-cxsim), the
// doorbell count, and the violations found so far.
func tornRig(t *testing.T, drop ...int32) (*connectx.NIC, *Shared, func() bool, *atomic.Int32, func() []string) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	m := New(Options{Mem: mem})
	words := make([]uint64, barSize/8)
	bar := memRegs(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), barSize))
	s, err := NewShared(m, bar)
	if err != nil {
		t.Fatal(err)
	}
	var viol []string
	var vmu sync.Mutex
	s.OnViolation = func(v string) { vmu.Lock(); viol = append(viol, v); vmu.Unlock() }
	var pmu sync.Mutex
	poll := func() bool { pmu.Lock(); defer pmu.Unlock(); return s.Poll() }
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !poll() {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	torn := new(atomic.Int32)
	regs := tornRegs{memRegs: bar, poll: poll, torn: torn, drop: drop}
	nic, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: regs, Mem: mem,
		Sleep: func() { time.Sleep(10 * time.Microsecond) }})
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	return nic, s, poll, torn, func() []string { vmu.Lock(); defer vmu.Unlock(); return slices.Clone(viol) }
}

func TestSharedTornDoorbell(t *testing.T) {
	nic, s, poll, torn, violations := tornRig(t)
	var completed atomic.Int32
	nic.SetTxDone(func(any, error) { completed.Add(1) })
	f := udpFrame([6]byte{2, 0, 0, 0, 0, 1}, nic.MAC(), bytes.Repeat([]byte("t"), 600))
	// 18 bytes inline and 1, 2, then 1 data segments: the second word
	// (sqn, DS count) changes with every doorbell.
	for _, frags := range [][][]byte{{f}, {f[:300], f[300:]}, {f}, {f[:100], f[100:400], f[400:]}} {
		if err := nic.Transmit(frags, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1000 && completed.Load() < 4; i++ {
		poll()
		nic.Poll()
	}
	if torn.Load() != 4 || completed.Load() != 4 {
		t.Fatalf("%d doorbells, %d completions", torn.Load(), completed.Load())
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			poll()
			time.Sleep(20 * time.Microsecond)
		}
	}()
	if err := nic.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	s.Finish()
	if v := violations(); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

// TestSharedHalfDoorbell: a doorbell whose second word the driver never
// stores is still reported, without a deadline: when the next doorbell's
// first word is seen beside the stale second word (the 2nd doorbell), and
// by Finish for the last (the 4th). Each is rung with a data-segment
// count that differs from the stale second word's, so a card would have
// rung it wrong.
func TestSharedHalfDoorbell(t *testing.T) {
	nic, s, poll, torn, violations := tornRig(t, 2, 4)
	var completed atomic.Int32
	nic.SetTxDone(func(any, error) { completed.Add(1) })
	f := udpFrame([6]byte{2, 0, 0, 0, 0, 1}, nic.MAC(), bytes.Repeat([]byte("t"), 600))
	for _, frags := range [][][]byte{{f}, {f[:300], f[300:]}, {f[:100], f[100:400], f[400:]}, {f}} {
		if err := nic.Transmit(frags, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The 3rd doorbell is taken on the poll at the 4th's first store; the
	// model then runs the SQ up to its doorbell record, the 4th WQE
	// included.
	for i := 0; i < 1000 && completed.Load() < 4; i++ {
		poll()
		nic.Poll()
	}
	if torn.Load() != 4 || completed.Load() != 4 {
		t.Fatalf("%d doorbells, %d completions", torn.Load(), completed.Load())
	}
	v := violations()
	if len(v) != 1 || !strings.Contains(v[0], "followed by the next") {
		t.Fatalf("violations before Finish: %q", v)
	}
	s.Finish()
	v = violations()
	if len(v) != 2 || !strings.Contains(v[1], "never completed") {
		t.Fatalf("violations after Finish: %q", v)
	}
}
