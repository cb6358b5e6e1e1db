package dmatest

import (
	"bytes"
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// resolve finds the memory at device address a for n bytes.
func (m *Memory) resolve(a dma.Addr, n int) (r *region, mp *mapping, off int) {
	for _, rr := range []*region{&m.cached, &m.coherent} {
		if a >= rr.base && a+dma.Addr(n) <= rr.base+dma.Addr(len(rr.cpu)) {
			o := int(a - rr.base)
			if _, ok := rr.find(o, n); ok {
				return rr, nil, o
			}
			return nil, nil, 0
		}
	}
	if a >= MapBase {
		slot := int((a - MapBase) / mapStride)
		if slot < len(m.maps) && m.maps[slot].live {
			p := &m.maps[slot]
			o := int(a - p.addr)
			if o >= 0 && o+n <= len(p.cpu) {
				return nil, p, o
			}
		}
	}
	return nil, nil, 0
}

// DeviceRead copies n = len(p) bytes at device address a into p, as the
// device's bus master would read them from RAM.
func (m *Memory) DeviceRead(a dma.Addr, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, mp, off := m.resolve(a, len(p))
	switch {
	case mp != nil:
		if mp.dir&dma.ToDevice == 0 {
			m.report(CPUOwned, "from-device mapping", a, off, mp.site)
		}
		if i := firstDiff(mp.cpu[off:off+len(p)], mp.shadow[off:off+len(p)]); i >= 0 {
			m.report(StaleDeviceRead, fmt.Sprintf("mapping %#x", mp.addr), a+dma.Addr(i), off+i, mp.site)
		}
		copy(p, mp.shadow[off:])
	case r == &m.coherent:
		copy(p, r.cpu[off:])
	case r == &m.cached:
		m.checkOwned(r, a, off, len(p))
		if i := firstDiff(r.cpu[off:off+len(p)], r.ram[off:off+len(p)]); i >= 0 {
			m.report(StaleDeviceRead, m.areaName(r, off+i), a+dma.Addr(i), i, r.lines[(off+i)/dma.CacheLine].site)
		}
		copy(p, r.ram[off:])
	default:
		m.report(BadAddress, "read", a, 0, 0)
		return fmt.Errorf("dmatest: device read %#x+%d: %w", a, len(p), dma.ErrUnreadable)
	}
	return nil
}

// DeviceWrite stores p at device address a, as the device's bus master would
// write RAM.
func (m *Memory) DeviceWrite(a dma.Addr, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, mp, off := m.resolve(a, len(p))
	switch {
	case mp != nil:
		if mp.dir&dma.FromDevice == 0 {
			m.report(CPUOwned, "to-device mapping written by device", a, off, mp.site)
		}
		copy(mp.shadow[off:], p)
	case r == &m.coherent:
		copy(r.cpu[off:], p)
	case r == &m.cached:
		m.checkOwned(r, a, off, len(p))
		copy(r.ram[off:], p)
		for i := off / dma.CacheLine; i <= (off+len(p)-1)/dma.CacheLine; i++ {
			r.lines[i].written = true
		}
	default:
		m.report(BadAddress, "write", a, 0, 0)
		return fmt.Errorf("dmatest: device write %#x+%d: %w", a, len(p), dma.ErrUnreadable)
	}
	return nil
}

func (m *Memory) checkOwned(r *region, a dma.Addr, off, n int) {
	for i := off / dma.CacheLine; i <= (off+n-1)/dma.CacheLine; i++ {
		if !r.lines[i].dev {
			lo := max(i*dma.CacheLine, off)
			m.report(CPUOwned, m.areaName(r, lo), a+dma.Addr(lo-off), lo-off, r.lines[i].site)
			return
		}
	}
}

// Coherent returns the CPU view of n bytes of coherent memory at device
// address a, for device models that access descriptors in place.
func (m *Memory) Coherent(a dma.Addr, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _, off := m.resolve(a, n)
	if r != &m.coherent {
		m.report(BadAddress, "descriptor access", a, 0, 0)
		return nil, fmt.Errorf("dmatest: %#x+%d is not coherent memory: %w", a, n, dma.ErrUnreadable)
	}
	return r.cpu[off : off+n : off+n], nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
