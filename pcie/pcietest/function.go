package pcietest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// BARKind selects what a BAR decodes.
type BARKind int

// BAR kinds.
const (
	Mem32 BARKind = iota
	Mem64
	Mem64Prefetch
	IO
)

type bar struct {
	size    uint64
	kind    BARKind
	h       mmio.Regs
	rawMask uint32 // non-zero: a malformed BAR with exactly these writable bits
}

// Function is one PCI function in the model: a configuration space (4 KiB,
// with per-bit write masks), BARs backed by Go handlers, an optional
// secondary bus (bridges), DMA and interrupts. Build one with NewEndpoint
// or NewBridge, then attach it.
type Function struct {
	h      *Host
	cfg    [4096]byte
	wmask  [4096]byte // bits the driver may write
	romask [4096]byte // bits writable only with DBI_RO_WR_EN (root port)
	bars   [6]bar
	next   int // next free capability offset

	parent   *Function // bridge above, nil on the bus below the root port
	dev, fn  int
	children [32][8]*Function // bridges: functions on the secondary bus
	gone     bool
	intx     bool
	// linkSta is the offset of Link Status when the port reports Data
	// Link Layer Link Active (ReportLinkActive), else 0.
	linkSta int
}

func (f *Function) put16(off int, v uint16) { binary.LittleEndian.PutUint16(f.cfg[off:], v) }
func (f *Function) put32(off int, v uint32) { binary.LittleEndian.PutUint32(f.cfg[off:], v) }
func (f *Function) get16(off int) uint16    { return binary.LittleEndian.Uint16(f.cfg[off:]) }
func (f *Function) get32(off int) uint32    { return binary.LittleEndian.Uint32(f.cfg[off:]) }

func (f *Function) writable(off, n int, mask uint32) {
	for i := 0; i < n; i++ {
		f.wmask[off+i] = byte(mask >> (8 * i))
	}
}

func newFunction(vendor, device uint16, class uint32, hdr byte) *Function {
	f := &Function{next: 0x40}
	f.put16(0x00, vendor)
	f.put16(0x02, device)
	f.put32(0x08, class<<8|0x01)
	f.cfg[0x0E] = hdr
	// Command: I/O, memory, bus master, SERR, INTx disable.
	f.writable(0x04, 2, 0x0507)
	f.writable(0x3C, 1, 0xFF) // interrupt line
	return f
}

// NewEndpoint returns a type 0 function with the given IDs and class
// (base class, sub-class and programming interface, 24 bits).
func NewEndpoint(vendor, device uint16, class uint32) *Function {
	return newFunction(vendor, device, class, 0)
}

// NewBridge returns a type 1 function (a switch port or PCI bridge) with
// writable bus numbers and windows. Attach functions below it with Attach.
func NewBridge(vendor, device uint16) *Function {
	f := newFunction(vendor, device, 0x060400, 1)
	f.writable(0x18, 3, 0xFFFFFF)    // primary, secondary, subordinate
	f.writable(0x20, 4, 0xFFF0_FFF0) // memory base/limit
	f.writable(0x24, 4, 0xFFF0_FFF0) // prefetchable base/limit
	f.writable(0x28, 8, 0xFFFF_FFFF) // prefetchable upper halves (both dwords)
	f.writable(0x2C, 4, 0xFFFF_FFFF) //
	f.writable(0x1C, 2, 0xF0F0)      // I/O base/limit
	f.put32(0x20, 0x0000_FFF0)       // windows closed at reset
	f.put32(0x24, 0x0000_FFF0)
	return f
}

// NewRawFunction returns a function whose configuration space and write
// masks are the given bytes (zero-extended to 4 KiB), for fuzzing: its
// header need not make sense. It has no BAR handlers.
func NewRawFunction(cfg, wmask []byte) *Function {
	f := &Function{next: 0x40}
	copy(f.cfg[:], cfg)
	copy(f.wmask[:], wmask)
	return f
}

// SetBAR makes BAR i decode size bytes (a power of two, at least 16)
// through h. A 64-bit BAR also takes BAR i+1.
func (f *Function) SetBAR(i int, size uint64, kind BARKind, h mmio.Regs) {
	f.bars[i] = bar{size: size, kind: kind, h: h}
	off := 0x10 + 4*i
	switch kind {
	case IO:
		f.put32(off, 1)
		f.writable(off, 4, ^uint32(size-1)&^3)
	case Mem32:
		f.put32(off, 0)
		f.writable(off, 4, ^uint32(size-1)&^0xF)
	case Mem64, Mem64Prefetch:
		flags := uint32(0x4)
		if kind == Mem64Prefetch {
			flags |= 0x8
		}
		f.put32(off, flags)
		f.writable(off, 4, uint32(^(size-1))&^0xF)
		f.writable(off+4, 4, uint32(^(size-1)>>32))
	}
}

// SetRawBAR makes BAR i a malformed one: its writable bits are mask, its
// read-only flag bits flags. Used to feed the driver bad sizes.
func (f *Function) SetRawBAR(i int, mask, flags uint32) {
	f.bars[i] = bar{rawMask: mask | 1<<31}
	f.put32(0x10+4*i, flags)
	f.writable(0x10+4*i, 4, mask)
}

// SetPin sets the interrupt pin (1 = INTA ... 4 = INTD).
func (f *Function) SetPin(pin int) { f.cfg[0x3D] = byte(pin) }

// SetMultiFunction sets bit 7 of the header type.
func (f *Function) SetMultiFunction() { f.cfg[0x0E] |= 0x80 }

// AddCapability appends a capability with the given body (the bytes
// after the ID and next pointer) and returns its offset.
func (f *Function) AddCapability(id byte, body []byte) int {
	off := f.next
	f.cfg[off] = id
	copy(f.cfg[off+2:], body)
	f.next = (off + 2 + len(body) + 3) &^ 3
	f.put16(0x06, f.get16(0x06)|1<<4)
	if f.cfg[0x34] == 0 {
		f.cfg[0x34] = byte(off)
	} else {
		p := int(f.cfg[0x34])
		for f.cfg[p+1] != 0 {
			p = int(f.cfg[p+1])
		}
		f.cfg[p+1] = byte(off)
	}
	return off
}

// AddPCIe adds a PCI Express capability of port type typ with the given
// supported speed (1 = 2.5 GT/s, 2 = 5 GT/s) and width; Link Status
// reports the same.
func (f *Function) AddPCIe(typ, gen, width int) int {
	body := make([]byte, 0x3A)
	binary.LittleEndian.PutUint16(body[0:], uint16(2|typ<<4))
	binary.LittleEndian.PutUint32(body[0x0C-2:], uint32(gen|width<<4))
	binary.LittleEndian.PutUint16(body[0x12-2:], uint16(gen|width<<4))
	return f.AddCapability(0x10, body)
}

// AddMSI adds an MSI capability (one message, 32- or 64-bit address).
func (f *Function) AddMSI(is64 bool) int {
	n := 10
	ctl := uint16(0)
	if is64 {
		n, ctl = 14, 1<<7
	}
	body := make([]byte, n)
	binary.LittleEndian.PutUint16(body, ctl)
	off := f.AddCapability(0x05, body)
	f.writable(off+2, 2, 0x0071) // enable, multiple message enable
	f.writable(off+4, 4, 0xFFFF_FFFC)
	if is64 {
		f.writable(off+8, 4, 0xFFFF_FFFF)
		f.writable(off+12, 2, 0xFFFF)
	} else {
		f.writable(off+8, 2, 0xFFFF)
	}
	return off
}

// AddMSIX adds an MSI-X capability with a table of n entries in BAR bir at
// offset off, and the pending bit array in BAR pbir at poff.
func (f *Function) AddMSIX(n, bir int, off uint32, pbir int, poff uint32) int {
	body := make([]byte, 10)
	binary.LittleEndian.PutUint16(body, uint16(n-1))
	binary.LittleEndian.PutUint32(body[2:], off|uint32(bir))
	binary.LittleEndian.PutUint32(body[6:], poff|uint32(pbir))
	o := f.AddCapability(0x11, body)
	f.writable(o+2, 2, 0xC000)
	return o
}

// SetCapNext overwrites the next pointer of the capability at off, to
// build malformed lists.
func (f *Function) SetCapNext(off int, next byte) { f.cfg[off+1] = next }

// Attach puts g at device dev, function fn of the bridge's secondary bus.
func (f *Function) Attach(dev, fn int, g *Function) {
	g.parent, g.dev, g.fn, g.h = f, dev, fn, f.h
	f.children[dev][fn] = g
	g.adopt()
}

func (f *Function) adopt() {
	for d := range f.children {
		for _, c := range f.children[d] {
			if c != nil {
				c.h = f.h
				c.adopt()
			}
		}
	}
}

// Vanish makes the function stop answering, as a surprise removal or a
// dead card does: configuration reads return all-ones and its BARs no
// longer decode.
func (f *Function) Vanish() { f.gone = true }

// lock takes the host's lock, if the function is attached, and returns
// the unlock.
func (f *Function) lock() func() {
	if f.h == nil {
		return func() {}
	}
	f.h.mu.Lock()
	return f.h.mu.Unlock
}

// Config returns a copy of the function's configuration space.
func (f *Function) Config() [4096]byte {
	defer f.lock()()
	return f.cfg
}

// Command returns the command register.
func (f *Function) Command() uint16 {
	defer f.lock()()
	return f.get16(0x04)
}

// BARAddr returns the bus address BAR i decodes (64-bit BARs combined).
func (f *Function) BARAddr(i int) uint64 {
	defer f.lock()()
	return f.barAddr(i)
}

func (f *Function) barAddr(i int) uint64 {
	b := f.bars[i]
	v := uint64(f.get32(0x10+4*i) &^ 0xF)
	if b.kind == Mem64 || b.kind == Mem64Prefetch {
		v |= uint64(f.get32(0x14+4*i)) << 32
	}
	return v
}

func (f *Function) readConfig(off int) uint32 {
	v := f.get32(off)
	if f.linkSta != 0 && off == f.linkSta&^3 {
		// Data Link Layer Link Active: something answers at device 0
		// of the secondary bus (the only device a link holds).
		v &^= 1 << 13 << (8 * (f.linkSta & 3))
		if c := f.children[0][0]; c != nil && !c.gone {
			v |= 1 << 13 << (8 * (f.linkSta & 3))
		}
	}
	return v
}

// ReportLinkActive makes a downstream (or root) port with a PCI Express
// capability (AddPCIe first) Data Link Layer Link Active Reporting
// Capable (Link Capabilities bit 20): Link Status bit 13 then says
// whether a function is attached at device 0 of its secondary bus
// (PCIe Base 3.0 7.8.6, 7.8.8).
func (f *Function) ReportLinkActive() {
	off := f.capability(0x10)
	if off == 0 {
		panic("pcietest: ReportLinkActive without a PCI Express capability")
	}
	f.put32(off+0x0C, f.get32(off+0x0C)|1<<20)
	f.linkSta = off + 0x12
}

func (f *Function) writeConfig(off int, v uint32, roEnable bool) {
	for i := 0; i < 4; i++ {
		m := f.wmask[off+i]
		if roEnable {
			m |= f.romask[off+i]
		}
		b := byte(v >> (8 * i))
		f.cfg[off+i] = f.cfg[off+i]&^m | b&m
	}
	if off == 0x04 {
		// Status: write 1 to clear nothing in this model but INTx is
		// read-only; the command half is masked above.
		f.updateINTx()
	}
}

// decode returns the function's handler and offset for bus address a.
func (f *Function) decode(a uint64) (mmio.Regs, uint32, bool) {
	if f.gone || f.get16(0x04)&2 == 0 {
		return nil, 0, false
	}
	for i, b := range f.bars {
		if b.size == 0 || b.kind == IO {
			continue
		}
		base := f.barAddr(i)
		if a >= base && a < base+b.size {
			return b.h, uint32(a - base), true
		}
	}
	return nil, 0, false
}

// window returns the bridge's memory window [lo, hi].
func (f *Function) window() (lo, hi uint64, ok bool) {
	v := f.get32(0x20)
	lo = uint64(v&0xFFF0) << 16
	hi = uint64(v>>16&0xFFF0)<<16 | 0xFFFFF
	return lo, hi, lo <= hi
}

// busMaster reports whether f and every bridge above it (the root port
// included) let f's memory requests upstream.
func (f *Function) busMaster() bool {
	for p := f; p != nil; p = p.parent {
		if p.get16(0x04)&4 == 0 {
			return false
		}
	}
	return f.h.root.get16(0x04)&4 != 0
}

// Errors of device-side operations.
var (
	ErrGone      = errors.New("pcietest: function has vanished")
	ErrNoMaster  = errors.New("pcietest: bus mastering disabled")
	ErrPeer      = errors.New("pcietest: address inside the root port window (peer-to-peer, not forwarded to memory)")
	ErrNoMSI     = errors.New("pcietest: MSI not enabled")
	ErrNoMemory  = errors.New("pcietest: no DMA memory model")
	ErrLinkDown  = errors.New("pcietest: link down")
	ErrAttached  = errors.New("pcietest: function not attached")
	ErrMSITarget = errors.New("pcietest: MSI write did not reach the MSI receiver")
	ErrMSIGated  = errors.New("pcietest: MSI dropped: the root port's MSI Enable is clear")
)

// DMAWrite is a memory write request from the function to bus address a.
func (f *Function) DMAWrite(a dma.Addr, p []byte) error {
	if f.h == nil {
		return ErrAttached
	}
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if err := f.h.upstream(f, uint64(a), len(p), true); err != nil {
		return err
	}
	if f.h.isMSI(uint64(a), len(p)) {
		if !f.h.rootMSIEnabled() {
			f.h.violate("MSI write %#x to the receiver at %#x with the root port's MSI Enable clear: the core drops it (Linux imx6_pcie_probe sets PCI_MSI_FLAGS_ENABLE in the root port's MSI capability)",
				binary.LittleEndian.Uint32(p), a)
			return ErrMSIGated
		}
		f.h.msiWrite(binary.LittleEndian.Uint32(p))
		return nil
	}
	if f.h.opts.Mem == nil {
		return ErrNoMemory
	}
	return f.h.opts.Mem.DeviceWrite(a, p)
}

// DMARead is a memory read request from the function.
func (f *Function) DMARead(a dma.Addr, p []byte) error {
	if f.h == nil {
		return ErrAttached
	}
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if err := f.h.upstream(f, uint64(a), len(p), false); err != nil {
		return err
	}
	if f.h.opts.Mem == nil {
		return ErrNoMemory
	}
	return f.h.opts.Mem.DeviceRead(a, p)
}

// SignalMSI sends the function's MSI message as its MSI capability is
// programmed (a 32-bit write of the data to the address).
func (f *Function) SignalMSI() error {
	if f.h == nil {
		return ErrAttached
	}
	f.h.mu.Lock()
	off := f.capability(0x05)
	if off == 0 || f.get16(off+2)&1 == 0 {
		f.h.mu.Unlock()
		return ErrNoMSI
	}
	addr := uint64(f.get32(off + 4))
	data := f.get16(off + 8)
	if f.get16(off+2)&(1<<7) != 0 {
		addr |= uint64(f.get32(off+8)) << 32
		data = f.get16(off + 12)
	}
	f.h.mu.Unlock()
	return f.deliver(addr, uint32(data))
}

// ErrMasked is returned when the MSI-X message is masked (function mask,
// or the entry's vector control), as the silicon would hold it pending.
var ErrMasked = errors.New("pcietest: MSI-X message masked")

// SignalMSIX sends the message of MSI-X table entry, reading the table
// from the BAR handler that holds it (it must store what is written).
func (f *Function) SignalMSIX(entry int) error {
	if f.h == nil {
		return ErrAttached
	}
	f.h.mu.Lock()
	off := f.capability(0x11)
	if off == 0 || f.get16(off+2)&(1<<15) == 0 {
		f.h.mu.Unlock()
		return ErrNoMSI
	}
	ctl, tbl := f.get16(off+2), f.get32(off+4)
	f.h.mu.Unlock()
	if entry < 0 || entry > int(ctl&0x7FF) {
		return fmt.Errorf("pcietest: MSI-X entry %d of %d", entry, int(ctl&0x7FF)+1)
	}
	h := f.bars[tbl&7].h
	if h == nil {
		return fmt.Errorf("pcietest: MSI-X table BAR%d has no handler", tbl&7)
	}
	e := tbl&^7 + uint32(16*entry)
	addr := uint64(h.Read32(e)) | uint64(h.Read32(e+4))<<32
	data, vc := h.Read32(e+8), h.Read32(e+12)
	if ctl&(1<<14) != 0 || vc&1 != 0 {
		return ErrMasked
	}
	return f.deliver(addr, data)
}

// capability returns the configuration-space offset of the capability
// with ID id in the function's list, 0 when it has none. f.h.mu is held.
func (f *Function) capability(id byte) int {
	for p := int(f.cfg[0x34]); p >= 0x40 && p < 0xFF; p = int(f.cfg[p+1]) {
		if f.cfg[p] == id {
			return p
		}
	}
	return 0
}

// deliver sends an MSI or MSI-X message: a 32-bit write of data to addr,
// upstream like any DMA write. A write no MSI receiver decodes still goes
// to memory, and is reported as ErrMSITarget.
func (f *Function) deliver(addr uint64, data uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], data)
	hit := f.h.msiMatches(addr)
	if err := f.DMAWrite(dma.Addr(addr), b[:]); err != nil {
		return err
	}
	if !hit {
		return fmt.Errorf("%w: address %#x", ErrMSITarget, addr)
	}
	return nil
}

// SetINTx drives the function's INTx pin.
func (f *Function) SetINTx(level bool) {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	f.intx = level
	f.updateINTx()
}

func (f *Function) updateINTx() {
	st := f.get16(0x06) &^ (1 << 3)
	if f.intx {
		st |= 1 << 3
	}
	f.put16(0x06, st)
}

// intxAsserted reports whether f drives its swizzled pin now.
func (f *Function) intxAsserted() (pin int, on bool) {
	pin = int(f.cfg[0x3D])
	if pin < 1 || pin > 4 || f.gone || !f.intx || f.get16(0x04)&(1<<10) != 0 {
		return 0, false
	}
	for c := f; c.parent != nil; c = c.parent {
		pin = (pin-1+c.dev)%4 + 1
	}
	return pin, true
}
