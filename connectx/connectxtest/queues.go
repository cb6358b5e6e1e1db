package connectxtest

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
)

// coherentWord returns 4 bytes of coherent memory at a for atomic access.
func (m *Model) coherent(a uint64, n int) []byte {
	b, err := m.mem.Coherent(dma.Addr(a), n)
	if err != nil {
		m.violation("shared words at %#x are not in coherent memory: %v", a, err)
		return nil
	}
	return b
}

func atomicLoadBE(b []byte) uint32 {
	var t [4]byte
	binary.NativeEndian.PutUint32(t[:], atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0]))))
	return binary.BigEndian.Uint32(t[:])
}

func atomicStoreBytes(b []byte, t []byte) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), binary.NativeEndian.Uint32(t))
}

// writeEntry writes a 64-byte entry (CQE/EQE) at a: the first 60 bytes,
// then the last word in one store, as the card orders it.
func (m *Model) writeEntry(a uint64, e []byte) {
	if err := m.mem.DeviceWrite(dma.Addr(a), e[:60]); err != nil {
		m.violation("entry write at %#x: %v", a, err)
		return
	}
	if w := m.coherent(a+60, 4); w != nil {
		atomicStoreBytes(w, e[60:64])
	}
	select {
	case m.act <- struct{}{}:
	default:
	}
}

// pageAddr maps byte offset off of a queue through its page list (4 KiB
// pages).
func pageAddr(pas []uint64, off uint64) (uint64, bool) {
	i := off / 4096
	if i >= uint64(len(pas)) {
		return 0, false
	}
	return pas[i] + off%4096, true
}

// postEQE writes an event into EQ eqn.
func (m *Model) postEQE(eqn uint32, typ, sub uint8, data []byte) {
	e := m.eqs[eqn]
	if e == nil || e.mask&(1<<typ) == 0 {
		return
	}
	size := uint32(1) << e.logSize
	if (e.pi-e.ci)&0xFFFFFF >= size {
		m.stats.EQOverruns++
		m.violation("EQ %d overrun: producer %d, consumer %d (EQ doorbell not updated)", eqn, e.pi, e.ci)
		return
	}
	var b [64]byte
	b[1], b[3] = typ, sub
	copy(b[0x20:0x3C], data)
	b[0x3F] = uint8((e.pi >> e.logSize) & 1)
	a, ok := pageAddr(e.pas, uint64(e.pi&(size-1))*64)
	if !ok {
		return
	}
	e.pi++
	m.writeEntry(a, b[:])
}

func (m *Model) postCQE(cqn uint32, cqe []byte) {
	c := m.cqs[cqn]
	if c == nil || c.err {
		return
	}
	size := uint32(1) << c.logSize
	if !c.oi && c.dbr != nil {
		ci := atomicLoadBE(c.dbr) & 0xFFFFFF
		if (c.pi-ci)&0xFFFFFF >= size {
			c.err = true
			m.stats.CQOverruns++
			var d [28]byte
			binary.BigEndian.PutUint32(d[0:], cqn)
			d[0x0B] = 1 // overrun
			m.postEQE(c.eqn, 0x04, 0, d[:])
			return
		}
	}
	slot := c.pi & (size - 1)
	if c.cc {
		slot = 0
	}
	cqe[0x3F] = cqe[0x3F]&^1 | uint8((c.pi>>c.logSize)&1)
	a, ok := pageAddr(c.pas, uint64(slot)*64)
	if !ok {
		return
	}
	c.pi++
	m.writeEntry(a, cqe)
}
