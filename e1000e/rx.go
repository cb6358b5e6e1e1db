package e1000e

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
)

// RxBufSize is the receive buffer size (RCTL.BSIZE 00, BSEX 0): the most
// the controller writes into one descriptor's buffer.
const RxBufSize = 2048

// RxAlign is how far into its DMA slot each receive buffer starts, so a
// frame's IP header, 14 bytes in, is 4-byte aligned, as the ENET's SHIFT16
// leaves it. The gVisor endpoint copies each frame 2 bytes into its own
// buffer; with source and destination equally aligned mod 4, 32-bit ARM's
// memmove and the one-pass copy and checksum take their word paths. Linux
// does the same: e1000e netdev.c e1000_alloc_rx_buffers posts skb->data of
// __netdev_alloc_skb_ip_align, NET_IP_ALIGN (2 unless the architecture
// overrides it; 32-bit ARM does not) past an aligned address.
//
// The controller allows it. The family's manual: "The Ethernet controller
// places no alignment restrictions on packet buffer addresses" (PCI/PCI-X
// Family of Gigabit Ethernet Controllers Software Developer's Manual,
// 3.2.2 Receive Data Storage); the 82575EB's manual says the same in its
// Receive Data Storage section and asks at most 16-bit alignment (with No
// Snoop in advanced descriptors), which RxAlign keeps. The 82574
// datasheet's receive descriptor formats give the buffer address as a
// plain 64-bit field; its own sentence on alignment was not found here.
// QEMU's e1000e writes a frame with pci_dma_write at the descriptor's
// address plus what it already wrote, at most the RCTL.BSIZE buffer size
// per descriptor, with no alignment check (e1000e_core.c
// e1000e_write_to_rx_buffers).
const RxAlign = 2

// rxSlot is each buffer's share of the DMA pool: RxAlign, then the whole
// RCTL.BSIZE buffer the controller may write, rounded up to whole cache
// lines so invalidating one slot never touches its neighbours. Linux maps
// only rx_buffer_len (1522 bytes at MTU 1500) behind its 2048-byte BSIZE,
// relying on RCTL.LPE to drop longer frames ("adjust allocation if LPE
// protects us, and we aren't using SBP", e1000_change_mtu); here the
// controller may fill the whole BSIZE it was told and stay inside the
// slot.
const rxSlot = (RxAlign + RxBufSize + dma.CacheLine - 1) &^ (dma.CacheLine - 1)

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
	pool, err := m.Alloc((n+spare)*rxSlot, dma.CacheLine, dma.Cached)
	if err != nil {
		return fmt.Errorf("e1000e: RX buffers: %w", err)
	}
	r.n = n
	r.pool = make([]Frame, n+spare)
	for i := range r.pool {
		r.pool[i].buf = pool.Slice(i*rxSlot, rxSlot)
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
// address (RxAlign into the slot), and a zero upper half (which clears DD).
// The invalidate covers the whole slot: the cache lines holding the
// RxBufSize bytes the controller may write from that address, no more.
func (r *rxRing) arm(m dma.Memory, i int) {
	m.SyncForDevice(&r.bufs[i].buf, 0, r.bufs[i].buf.Len(), dma.FromDevice)
	a := uint64(r.bufs[i].buf.Addr()) + RxAlign
	r.store(i, 0, uint32(a))
	r.store(i, 1, uint32(a>>32))
	r.store(i, 3, 0)
	r.store(i, 2, 0)
}

// abort takes every ring buffer back from a controller that was reset
// (it owns none of them any more): each was handed over by arm, so each
// is synced for the CPU before start hands it over again, as Linux's
// e1000_clean_rx_ring unmaps every RX buffer in e1000e_down. It returns
// how many held a frame the driver had not received (DD set): those are
// dropped.
func (r *rxRing) abort(m dma.Memory) int {
	dropped := 0
	for i := 0; i < r.n; i++ {
		if r.load(i, 2)&rxdStatDD != 0 {
			dropped++
		}
		m.SyncForCPU(&r.bufs[i].buf, 0, r.bufs[i].buf.Len(), dma.FromDevice)
	}
	return dropped
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
		f.n, f.data, f.IPv4, f.L4 = n, buf.Bytes()[RxAlign:RxAlign+ln], false, false
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
