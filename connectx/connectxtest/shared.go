package connectxtest

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
)

// DeviceMemory is host memory as the function reaches it by DMA: reads and
// writes at bus addresses, and the CPU view of words the card and the
// driver share while both run (accessed atomically). dmatest.Memory is
// one; FileMemory (a file shared with an emulator) another.
type DeviceMemory interface {
	DeviceRead(a dma.Addr, p []byte) error
	DeviceWrite(a dma.Addr, p []byte) error
	Coherent(a dma.Addr, n int) ([]byte, error)
}

// FileMemory is guest RAM shared with an emulator (QEMU's
// memory-backend-file with share=on): bus address a is byte a-Base of Mem.
// The i.MX7D root complex passes bus addresses to memory unchanged (no
// inbound translation is programmed, and QEMU's dw-pcie models none), so
// Base is the DRAM base. An access outside Mem is an error, as it would be
// a bus error on a card; OnFault, when set, is told of each one.
type FileMemory struct {
	Mem     []byte
	Base    uint64
	OnFault func(what string)
}

func (f *FileMemory) span(a dma.Addr, n int, what string) ([]byte, error) {
	off := uint64(a) - f.Base
	if uint64(a) < f.Base || n < 0 || off > uint64(len(f.Mem)) || uint64(len(f.Mem))-off < uint64(n) {
		err := fmt.Errorf("connectxtest: DMA %s %#x+%d outside guest RAM %#x+%#x", what, uint64(a), n, f.Base, len(f.Mem))
		if f.OnFault != nil {
			f.OnFault(err.Error())
		}
		return nil, err
	}
	return f.Mem[off : off+uint64(n) : off+uint64(n)], nil
}

// DeviceRead copies guest memory at a into p.
func (f *FileMemory) DeviceRead(a dma.Addr, p []byte) error {
	b, err := f.span(a, len(p), "read")
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// DeviceWrite copies p into guest memory at a.
func (f *FileMemory) DeviceWrite(a dma.Addr, p []byte) error {
	b, err := f.span(a, len(p), "write")
	if err != nil {
		return err
	}
	copy(b, p)
	return nil
}

// Coherent returns guest memory at a for atomic word access; a must be
// 4-byte aligned.
func (f *FileMemory) Coherent(a dma.Addr, n int) ([]byte, error) {
	if a%4 != 0 {
		err := fmt.Errorf("connectxtest: shared word at %#x not 4-byte aligned", uint64(a))
		if f.OnFault != nil {
			f.OnFault(err.Error())
		}
		return nil, err
	}
	return f.span(a, n, "shared word")
}

// Init segment words the Shared transport publishes (PRM init segment:
// fw_rev, cmdif_rev_fw_sub, cmdq_addr_h, cmdq_addr_l_sz, initializing,
// health counter).
var published = []uint32{0x000, 0x004, 0x010, 0x014, 0x1FC, 0x1010}

// Shared runs a Model against a BAR0 that is plain memory shared with the
// driver (an emulator's ivshmem BAR backed by a file): the driver's stores
// land in Bar without calling the model, so Poll finds them by what they
// changed, as a card learns them: the command queue address, the command
// doorbell vector (cleared as its commands are taken, atomically), the UAR
// send doorbells and EQ consumer doorbells. The driver's loads read what
// Poll last published there (firmware revision, command interface, the
// initializing bit, the health counter, which Poll advances each call).
//
// Ordering: the driver's stores reach the shared pages in program order
// as far as its barriers require (QEMU executes them as host stores and
// turns the guest's DMB into a host fence), and this process reads each
// word the driver publishes (doorbell vector, UAR words, doorbell records,
// the command entry's ownership) with one atomic load before the data it
// covers, then re-reads it on every poll: nothing is cached between polls.
// Entries it writes (CQEs, EQEs, the command status) are written body
// first, the ownership word last in one atomic store.
//
// Send doorbells: a poll may fall between the driver's two 32-bit stores
// (the guest descheduled there, for as long as the host pleases) and see
// the new first word beside the previous second word. Such a doorbell is
// not judged then: it is taken on the poll that sees its second word
// (changed, or the posted WQE's own), however late, as a card acts on the
// store that reaches it. One whose second word never comes is a violation
// when the next doorbell's first word is seen beside the same stale word,
// or at Finish.
//
// What this transport cannot see, and so cannot check: a store that
// leaves a word unchanged (cmdq_addr_h rewritten with the same value), the
// order of the two halves of a doorbell beyond what their values show,
// configuration space (Memory Space and Bus Master Enable are assumed on:
// an ivshmem function has no DMA to gate), and loads.
type Shared struct {
	m   *Model
	bar []byte
	// pub holds what Poll last stored at each published offset.
	pub map[uint32]uint32
	// seen holds the last value of each UAR doorbell word taken.
	seen map[uint32]uint64
	// half holds the send doorbells whose second word Poll waits for.
	half map[uint32]halfDoorbell
	// OnViolation, when set, is told each violation as Poll finds it
	// (otherwise they stay for Model.Violations).
	OnViolation func(string)
}

// NewShared serves m on bar (at least 64 KiB: init segment and UAR
// pages), which it clears and publishes the init segment into, the
// firmware initializing.
func NewShared(m *Model, bar []byte) (*Shared, error) {
	if len(bar) < barSize {
		return nil, fmt.Errorf("connectxtest: shared BAR of %d bytes, need %d", len(bar), barSize)
	}
	if uintptr(unsafe.Pointer(&bar[0]))%8 != 0 {
		return nil, fmt.Errorf("connectxtest: shared BAR not 8-byte aligned")
	}
	for i := range bar[:barSize] {
		bar[i] = 0
	}
	m.mu.Lock()
	m.cfg[1] = 0x6 // memory space and bus master: see the type's comment
	m.mu.Unlock()
	s := &Shared{m: m, bar: bar, pub: map[uint32]uint32{}, seen: map[uint32]uint64{}, half: map[uint32]halfDoorbell{}}
	for _, off := range published {
		v := m.Read32(off)
		s.store(off, v)
		s.pub[off] = v
	}
	return s, nil
}

func (s *Shared) word(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&s.bar[off])) }

// load returns the word at off as the driver's little-endian 32-bit load
// sees it (the value mmio.Regs.Read32 would return).
func (s *Shared) load(off uint32) uint32 {
	var t [4]byte
	binary.NativeEndian.PutUint32(t[:], atomic.LoadUint32(s.word(off)))
	return binary.LittleEndian.Uint32(t[:])
}

func native(v uint32) uint32 {
	var t [4]byte
	binary.LittleEndian.PutUint32(t[:], v)
	return binary.NativeEndian.Uint32(t[:])
}

func (s *Shared) store(off, v uint32) { atomic.StoreUint32(s.word(off), native(v)) }

// halfDoorbell is a send doorbell whose new first word Poll has seen
// beside a second word that is not yet its own: lo, and the second word hi
// it saw then.
type halfDoorbell struct{ lo, hi uint32 }

// completes reports whether hi completes the doorbell whose first word is
// lo that Poll first saw beside the second word stale: the second word
// has been stored since (it changed: the card acts on that store, and the
// model judges what it says), or it already is the posted WQE's own.
func (s *Shared) completes(lo, hi, stale uint32) bool {
	return hi != stale || s.own(lo, hi)
}

// own reports whether hi is the second control word of the WQE the
// doorbell words lo, hi name.
func (s *Shared) own(lo, hi uint32) bool {
	want, ok := s.ctrlHi(lo, hi)
	return ok && want == hi
}

// Finish reports, as violations, the send doorbells whose first word was
// stored and whose second never was (Poll waits for it without a
// deadline: a driver may be descheduled between its two stores). Call it
// once the driver has stopped (its teardown done, or its emulator gone).
func (s *Shared) Finish() {
	s.m.mu.Lock()
	for off, p := range s.half {
		s.m.violation("UAR %d send doorbell at %#x: first word %#x never completed by its second word (still %#x)", off/4096, off%4096, p.lo, p.hi)
	}
	s.m.mu.Unlock()
	clear(s.half)
	if s.OnViolation != nil {
		for _, v := range s.m.Violations() {
			s.OnViolation(v)
		}
	}
}

// take runs the send doorbell lo, hi at off on the model.
func (s *Shared) take(off, lo, hi uint32) {
	s.seen[off] = uint64(hi)<<32 | uint64(lo)
	s.m.Write32(off, lo)
	s.m.Write32(off+4, hi)
}

// ctrlHi returns the second control word (as the driver's little-endian
// store writes it) of the WQE the doorbell words lo, hi name, read from
// memory; false when there is no such SQ or WQE.
func (s *Shared) ctrlHi(lo, hi uint32) (uint32, bool) {
	var l, h [4]byte
	binary.LittleEndian.PutUint32(l[:], lo)
	binary.LittleEndian.PutUint32(h[:], hi)
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	q := s.m.sqs[binary.BigEndian.Uint32(h[:])>>8]
	if q == nil {
		return 0, false
	}
	idx := uint32(binary.BigEndian.Uint16(l[1:3]))
	w, err := s.m.readWQ(q, uint64(idx&(1<<q.logSize-1))*64, 8)
	if err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint32(w[4:8]), true
}

// Poll takes what the driver wrote since the last call, runs it on the
// model and publishes the init segment. It reports whether the driver had
// written anything (a caller backs off when it had not).
func (s *Shared) Poll() bool {
	busy := false
	// Command queue address: the driver writes cmdq_addr_h, then
	// cmdq_addr_l_sz with the address (its low bits, log size and stride,
	// are read-only and written as zero).
	if v := s.load(0x14); v != s.pub[0x14] {
		busy = true
		s.m.Write32(0x10, s.load(0x10))
		s.m.Write32(0x14, v)
		// The driver may already have read the initializing bit as clear
		// before this poll saw the address: no second busy period.
		s.m.mu.Lock()
		s.m.polls = 0
		s.m.mu.Unlock()
		// Read back as the card shows it (address, log size and stride),
		// unless the driver has stored again meanwhile.
		s.pub[0x14] = v
		if r := s.m.Read32(0x14); atomic.CompareAndSwapUint32(s.word(0x14), native(v), native(r)) {
			s.pub[0x14] = r
		}
	}
	// Command doorbell: take the rung slots, clearing exactly them.
	for {
		w := atomic.LoadUint32(s.word(0x18))
		if w == 0 {
			break
		}
		if atomic.CompareAndSwapUint32(s.word(0x18), w, 0) {
			busy = true
			var t [4]byte
			binary.NativeEndian.PutUint32(t[:], w)
			s.m.Write32(0x18, binary.LittleEndian.Uint32(t[:]))
			break
		}
	}
	// UAR pages: send doorbells (two words, the second naming the SQ) and
	// EQ consumer doorbells.
	for page := uint32(1); page < uarPages; page++ {
		base := page * 4096
		for _, off := range []uint32{base + 0x800, base + 0x900} {
			lo1 := s.load(off)
			hi := s.load(off + 4)
			lo2 := s.load(off)
			if lo1 != lo2 {
				busy = true // being written: taken next time
				continue
			}
			if p, ok := s.half[off]; ok {
				if lo1 == p.lo && !s.completes(lo1, hi, p.hi) {
					continue // still waiting for its second store
				}
				delete(s.half, off)
				if lo1 != p.lo && hi == p.hi && !s.own(lo1, hi) {
					// A driver stores a doorbell's second word (which
					// differs from the stale p.hi: p.lo was waiting for
					// it) before the next doorbell's first word on this
					// register. Still unchanged, it was never stored: a
					// card would have rung p.lo with a stale second word.
					s.m.mu.Lock()
					s.m.violation("UAR %d send doorbell at %#x: first word %#x followed by the next (%#x) without its second word (still %#x)", page, off%4096, p.lo, lo1, hi)
					s.m.mu.Unlock()
				}
				switch {
				case lo1 == p.lo:
				case hi != p.hi && s.own(p.lo, hi):
					// p's second word landed, the next doorbell's not
					// yet: take p as the card took it.
					s.take(off, p.lo, hi)
					busy = true
				default:
					// The next doorbell's counter covers p's WQEs; it is
					// judged against p's stale second word.
					s.seen[off] = uint64(p.hi)<<32 | uint64(p.lo)
				}
			}
			if v := uint64(hi)<<32 | uint64(lo1); v == s.seen[off] {
				continue
			}
			if uint32(s.seen[off]) != lo1 && !s.completes(lo1, hi, uint32(s.seen[off]>>32)) {
				// A new first word beside the previous doorbell's second
				// word, which is not this WQE's: the driver's second
				// store has not landed yet (it stores the two one after
				// the other, and this poll fell between). A card acts on
				// the store it sees: the doorbell is taken on the poll
				// that sees its second word, however late.
				s.half[off] = halfDoorbell{lo: lo1, hi: hi}
				busy = true
				continue
			}
			s.take(off, lo1, hi)
			busy = true
		}
		for _, off := range []uint32{base + 0x40, base + 0x48} {
			v := uint64(s.load(off))
			if v == s.seen[off] {
				continue
			}
			s.seen[off] = v
			busy = true
			s.m.Write32(off, uint32(v))
		}
	}
	// Publish the read-only words (the command queue address words are
	// handled above: the driver writes them).
	for _, off := range published {
		if off == 0x10 || off == 0x14 {
			continue
		}
		if v := s.m.Read32(off); v != s.pub[off] {
			s.store(off, v)
			s.pub[off] = v
		}
	}
	if s.OnViolation != nil {
		for _, v := range s.m.Violations() {
			s.OnViolation(v)
		}
	}
	return busy
}
