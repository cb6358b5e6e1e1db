package e1000e

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
)

// RxBufSize is the receive buffer size (RCTL.BSIZE 00, BSEX 0).
const RxBufSize = 2048

type rxRing struct {
	ring  dma.Buffer
	n     int
	pool  []Frame  // one per buffer, allocated once
	bufs  []*Frame // buffer in each ring slot
	spare []*Frame // buffers not in the ring and not lent out
	next  int      // next descriptor to look at
}

func (r *rxRing) alloc(m dma.Memory, n, spare int) error {
	var err error
	if r.ring, err = m.Alloc(n*DescSize, 128, dma.Coherent); err != nil {
		return fmt.Errorf("e1000e: RX ring: %w", err)
	}
	pool, err := m.Alloc((n+spare)*RxBufSize, dma.CacheLine, dma.Cached)
	if err != nil {
		return fmt.Errorf("e1000e: RX buffers: %w", err)
	}
	r.n = n
	r.pool = make([]Frame, n+spare)
	for i := range r.pool {
		r.pool[i].buf = pool.Slice(i*RxBufSize, RxBufSize)
	}
	r.bufs = make([]*Frame, n)
	for i := range r.bufs {
		r.bufs[i] = &r.pool[i]
	}
	r.spare = make([]*Frame, 0, spare)
	for i := 0; i < spare; i++ {
		r.spare = append(r.spare, &r.pool[n+i])
	}
	return nil
}

func (r *rxRing) word(i, w int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.ring.Bytes()[i*DescSize+4*w]))
}
func (r *rxRing) store(i, w int, v uint32) { atomic.StoreUint32(r.word(i, w), v) }
func (r *rxRing) load(i, w int) uint32     { return atomic.LoadUint32(r.word(i, w)) }

// arm gives descriptor i its buffer in the read format: the buffer
// address, and a zero upper half (which clears DD).
func (r *rxRing) arm(m dma.Memory, i int) {
	m.SyncForDevice(&r.bufs[i].buf, 0, r.bufs[i].buf.Len(), dma.FromDevice)
	a := uint64(r.bufs[i].buf.Addr())
	r.store(i, 0, uint32(a))
	r.store(i, 1, uint32(a>>32))
	r.store(i, 3, 0)
	r.store(i, 2, 0)
}

func (r *rxRing) start(n *NIC) {
	for i := 0; i < r.n; i++ {
		r.arm(n.cfg.Mem, i)
	}
	r.next = 0
	a := uint64(r.ring.Addr())
	n.r.Write32(RDBAL, uint32(a))
	n.r.Write32(RDBAH, uint32(a>>32))
	n.r.Write32(RDLEN, uint32(r.n*DescSize))
	n.r.Write32(RDH, 0)
	n.cfg.Mem.Barrier()
	// All but one descriptor to the device: RDH == RDT means none.
	n.r.Write32(RDT, uint32(r.n-1))
	n.r.Write32(RXCSUM, rxcsumIPOFL|rxcsumTUOFL)
	n.r.Write32(RFCTL, n.r.Read32(RFCTL)|rfctlEXTEN)
	n.r.Write32(RDTR, 0)
	n.r.Write32(RADV, 0)
	n.r.Write32(RCTL, rctlEN|rctlBAM|rctlSECRC|rctlBSize2048|rctlRDMTSHalf)
}

// Frame is a received frame whose buffer is lent to the caller until
// Release. Frames are the driver's (one per RX buffer, reused): the
// caller must not keep one after Release.
type Frame struct {
	n    *NIC
	buf  dma.Buffer
	data []byte
	// IPv4 and L4: the hardware verified the IPv4 header checksum and
	// the TCP/UDP checksum and found them good.
	IPv4, L4 bool
}

// Bytes returns the frame from the destination address, without FCS.
func (f *Frame) Bytes() []byte { return f.data }

// Verified reports the hardware's checksum verdicts.
func (f *Frame) Verified() (bool, bool) { return f.IPv4, f.L4 }

// Release returns the buffer to the driver. A second Release is an error.
func (f *Frame) Release() error {
	if f.n == nil {
		return fmt.Errorf("e1000e: frame released twice: %w", ErrConfig)
	}
	n := f.n
	n.rxMu.Lock()
	f.n, f.data = nil, nil
	n.rx.spare = append(n.rx.spare, f)
	n.rxMu.Unlock()
	return nil
}

// Receive returns the next received frame, (nil, nil) when none waits, or
// an error for a frame the hardware flagged bad (counted, its descriptor
// already given back). The frame's buffer is the caller's until Release;
// its descriptor gets a spare buffer at once.
func (n *NIC) Receive() (*Frame, error) {
	n.rxMu.Lock()
	defer n.rxMu.Unlock()
	r := &n.rx
	i := r.next
	st := r.load(i, 2)
	if st&rxdStatDD == 0 {
		return nil, nil
	}
	ln := int(r.load(i, 3) & 0xFFFF)
	slot := r.bufs[i]
	buf := slot.buf
	var err error
	switch {
	case st&rxdFrameErr != 0:
		n.count(func(s *Stats) { s.Rx.Errors++ })
		err = fmt.Errorf("e1000e: RX descriptor %d status %#x: %w", i, st, ErrRxFrame)
	case st&rxdStatEOP == 0 || ln > RxBufSize || ln < 14:
		n.count(func(s *Stats) { s.Rx.Multi++ })
		err = fmt.Errorf("e1000e: RX descriptor %d: %d bytes, status %#x: %w", i, ln, st, ErrRxFrame)
	case len(r.spare) == 0:
		n.count(func(s *Stats) { s.Rx.NoBuffer++ })
		err = fmt.Errorf("e1000e: RX descriptor %d: %w", i, ErrNoBuffers)
	}
	var f *Frame
	// The device wrote the buffer: take it back before reading it or
	// handing it to the device again.
	n.cfg.Mem.SyncForCPU(&slot.buf, 0, buf.Len(), dma.FromDevice)
	if err == nil {
		f = slot
		f.n, f.data, f.IPv4, f.L4 = n, buf.Bytes()[:ln], false, false
		if st&rxdStatIXSM == 0 {
			f.IPv4 = st&rxdStatIPCS != 0 && st&rxdErrIPE == 0
			f.L4 = st&(rxdStatTCPCS|rxdStatUDPCS) != 0 && st&rxdErrTCPE == 0
		}
		bad := st&(rxdErrIPE|rxdErrTCPE) != 0
		r.bufs[i] = r.spare[len(r.spare)-1]
		r.spare = r.spare[:len(r.spare)-1]
		n.count(func(s *Stats) {
			s.Rx.Frames++
			s.Rx.Bytes += uint64(ln)
			if f.IPv4 {
				s.Rx.CsumIP++
			}
			if f.L4 {
				s.Rx.CsumL4++
			}
			if bad {
				s.Rx.CsumBad++
			}
		})
	}
	// Give the descriptor back (with the same buffer on error).
	r.arm(n.cfg.Mem, i)
	n.cfg.Mem.Barrier()
	n.r.Write32(RDT, uint32(i))
	r.next = (i + 1) % r.n
	return f, err
}
