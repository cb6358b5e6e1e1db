package e1000e

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/tso"
)

// MaxPerDesc is the most bytes one TX data descriptor carries (Linux
// E1000_MAX_PER_TXD); longer fragments take several.
const MaxPerDesc = 8192

// MaxDataDescs is the most data descriptors one packet may take. QEMU's
// 82574L, the reference device, gathers a packet into at most
// E1000E_MAX_TX_FRAGS = 64 fragments, one per data descriptor
// (hw/net/e1000e_core.c, net_tx_pkt_add_raw_fragment), and drops a packet
// with more at its EOP descriptor without an error or a counter; Linux
// e1000e never comes near it (MAX_SKB_FRAGS). Frames with more fragments
// are gathered into one buffer; GSO packets with more are refused, and
// Info states a view limit that keeps every GSO packet below it.
const MaxDataDescs = 64

// hdrSlot is the size of the per-descriptor header copy: Ethernet, two
// VLAN tags, the largest IPv4/IPv6 and TCP headers fit.
const hdrSlot = 256

type txSlot struct {
	m      dma.Buffer // mapping to unmap when the descriptor is reclaimed
	mapped bool
	hdr    bool // the header slot of this index was handed to the device
	end    int  // first descriptor of a packet: index of its last
	cookie any
	segs   int
}

type txRing struct {
	ring  dma.Buffer
	hdrs  dma.Buffer
	n     int
	slots []txSlot
	clean int // next descriptor to reclaim
	tail  int // next descriptor to fill (TDT)
	used  int
}

func (t *txRing) alloc(m dma.Memory, n int) error {
	var err error
	if t.ring, err = m.Alloc(n*DescSize, 128, dma.Coherent); err != nil {
		return fmt.Errorf("e1000e: TX ring: %w", err)
	}
	if t.hdrs, err = m.Alloc(n*hdrSlot, dma.CacheLine, dma.Cached); err != nil {
		return fmt.Errorf("e1000e: TX header slots: %w", err)
	}
	t.n = n
	t.slots = make([]txSlot, n)
	return nil
}

func (t *txRing) word(i, w int) *uint32 {
	return (*uint32)(unsafe.Pointer(&t.ring.Bytes()[i*DescSize+4*w]))
}

// store writes one descriptor word with one 32-bit access.
func (t *txRing) store(i, w int, v uint32) { atomic.StoreUint32(t.word(i, w), v) }
func (t *txRing) load(i, w int) uint32     { return atomic.LoadUint32(t.word(i, w)) }

func (t *txRing) start(n *NIC) {
	for i := 0; i < 4*t.n; i++ {
		t.store(i/4, i%4, 0)
	}
	a := uint64(t.ring.Addr())
	n.r.Write32(TDBAL, uint32(a))
	n.r.Write32(TDBAH, uint32(a>>32))
	n.r.Write32(TDLEN, uint32(t.n*DescSize))
	n.r.Write32(TDH, 0)
	n.r.Write32(TDT, 0)
	t.clean, t.tail, t.used = 0, 0, 0
	n.r.Write32(TIPG, tipgDefault)
	// Collision threshold 15, collision distance 63 (Linux E1000_CT_SHIFT, E1000_COLLISION_DISTANCE).
	n.r.Write32(TCTL, tctlEN|tctlPSP|15<<tctlCTShift|63<<tctlCOLDShift|tctlRTLC)
}

func (t *txRing) free() int { return t.n - 1 - t.used }

// put writes a data or context descriptor at the tail.
func (t *txRing) put(addr dma.Addr, w2, w3 uint32) int {
	i := t.tail
	t.store(i, 0, uint32(addr))
	t.store(i, 1, uint32(uint64(addr)>>32))
	t.store(i, 3, w3) // STA clear: DD is the device's to set
	t.store(i, 2, w2)
	t.tail = (t.tail + 1) % t.n
	t.used++
	return i
}

func (t *txRing) putCtx(w0, w1, w2, w3 uint32) int {
	i := t.tail
	t.store(i, 0, w0)
	t.store(i, 1, w1)
	t.store(i, 3, w3)
	t.store(i, 2, w2)
	t.tail = (t.tail + 1) % t.n
	t.used++
	return i
}

// abort unmaps everything in flight and returns the cookies.
func (t *txRing) abort(m dma.Memory) []any {
	var out []any
	for t.used > 0 {
		s := &t.slots[t.clean]
		t.release(m, t.clean)
		if s.cookie != nil {
			out = append(out, s.cookie)
			s.cookie = nil
		}
		t.clean = (t.clean + 1) % t.n
		t.used--
	}
	return out
}

func (t *txRing) release(m dma.Memory, i int) {
	s := &t.slots[i]
	if s.mapped {
		_ = m.Unmap(&s.m, dma.ToDevice)
		s.mapped = false
	}
	if s.hdr {
		m.SyncForCPU(&t.hdrs, i*hdrSlot, hdrSlot, dma.ToDevice)
		s.hdr = false
	}
}

// descsFor counts data descriptors for the fragments.
func descsFor(frags [][]byte) int {
	d := 0
	for _, f := range frags {
		d += (len(f) + MaxPerDesc - 1) / MaxPerDesc
	}
	return d
}

// Transmit queues one frame given as fragments, referenced in place until
// completion; csum asks for IPv4 header and TCP/UDP checksum insertion,
// for which the driver writes the pseudo-header sum into the frame's
// checksum field (the controller sums from the transport header on and
// adds that seed) and zeroes the IPv4 header checksum.
func (n *NIC) Transmit(frags [][]byte, csum bool, cookie any) error {
	total := 0
	for _, f := range frags {
		total += len(f)
	}
	if total < 14 || total > n.MaxFrame() {
		return n.txError(fmt.Errorf("e1000e: transmit %d bytes: %w", total, ErrFrame))
	}
	var ctx [4]uint32
	var popts uint32
	if csum {
		var err error
		ctx, popts, err = csumContext(frags[0], total)
		if err != nil {
			return n.txError(err)
		}
	}
	n.txMu.Lock()
	defer n.txMu.Unlock()
	if n.closed.Load() {
		return ErrClosed
	}
	gathered := 0
	if descsFor(frags) > MaxDataDescs {
		// A 1518-byte frame in more than 64 pieces: one copy.
		buf := make([]byte, 0, total)
		for _, f := range frags {
			buf = append(buf, f...)
		}
		frags, gathered = [][]byte{buf}, total
	}
	need := descsFor(frags)
	if popts != 0 {
		need++
	}
	if need > n.tx.n-1 {
		return n.txError(fmt.Errorf("e1000e: frame needs %d descriptors, ring has %d: %w", need, n.tx.n, ErrFrame))
	}
	if need > n.tx.free() {
		n.count(func(s *Stats) { s.Tx.RingFull++ })
		return ErrRingFull
	}
	first := n.tx.tail
	if popts != 0 {
		n.tx.putCtx(ctx[0], ctx[1], ctx[2], ctx[3])
	}
	cmd := uint32(txdCmdDEXT | txdDTypD | txdCmdIFCS)
	if err := n.putData(first, nil, frags, cmd, popts, cookie); err != nil {
		return err
	}
	n.count(func(s *Stats) {
		s.Tx.Frames++
		s.Tx.Bytes += uint64(total)
		s.Tx.Descs += uint64(need)
		s.Tx.Copied += uint64(gathered)
		if popts != 0 {
			s.Tx.Contexts++
			s.Tx.CsumFrames++
		}
	})
	return nil
}

// putData maps and writes the data descriptors of one packet (an optional
// header already copied into the header slot, then frags) whose first
// descriptor is first, sets EOP and RS on the last and moves TDT. On a
// mapping failure nothing is published.
func (n *NIC) putData(first int, hdr []byte, frags [][]byte, cmd, popts uint32, cookie any) error {
	t := &n.tx
	if hdr != nil {
		i := t.tail
		copy(t.hdrs.Bytes()[i*hdrSlot:(i+1)*hdrSlot], hdr)
		n.cfg.Mem.SyncForDevice(&t.hdrs, i*hdrSlot, hdrSlot, dma.ToDevice)
		t.slots[i].hdr = true
		t.put(t.hdrs.Addr()+dma.Addr(i*hdrSlot), cmd|uint32(len(hdr)), popts)
	}
	last := -1
	for _, f := range frags {
		if len(f) == 0 {
			continue
		}
		s := &t.slots[t.tail]
		if err := n.cfg.Mem.Map(&s.m, f, dma.ToDevice); err != nil {
			// Roll back: nothing after first was published (TDT not moved).
			for t.tail != first {
				t.tail = (t.tail - 1 + t.n) % t.n
				t.used--
				t.release(n.cfg.Mem, t.tail)
			}
			return n.txError(fmt.Errorf("e1000e: mapping a %d-byte fragment: %w", len(f), err))
		}
		s.mapped = true
		a := s.m.Addr()
		for off := 0; off < len(f); off += MaxPerDesc {
			k := min(MaxPerDesc, len(f)-off)
			last = t.put(a+dma.Addr(off), cmd|uint32(k), popts)
		}
	}
	if last < 0 {
		last = (t.tail - 1 + t.n) % t.n
	}
	t.store(last, 2, t.load(last, 2)|txdCmdEOP|txdCmdRS)
	t.slots[first].end = last
	t.slots[first].cookie = cookie
	n.cfg.Mem.Barrier()
	n.r.Write32(TDT, uint32(t.tail))
	return nil
}

// csumContext builds the checksum context descriptor for a frame whose
// headers are in head (total bytes long), writing the seeds into head.
func csumContext(head []byte, total int) (ctx [4]uint32, popts uint32, err error) {
	h, perr := pkt.Parse(head)
	if perr != nil || h.L4 > 255 {
		return ctx, 0, fmt.Errorf("e1000e: checksum offload: headers not in the first fragment: %v: %w", perr, ErrFrame)
	}
	ipEnd := h.L4 - 1
	if !h.IPv6 {
		binary.BigEndian.PutUint16(head[h.L3+10:], 0)
		popts |= txdPoptIXSM
	} else {
		ipEnd = 0
	}
	var tucmd uint32
	tucso := h.L4
	if h.CsumOff >= 0 && !h.Fragment {
		if h.CsumOff+2 > len(head) {
			return ctx, 0, fmt.Errorf("e1000e: checksum offload: checksum field past the first fragment: %w", ErrFrame)
		}
		l4 := min(h.IPEnd, total) - h.L4
		binary.BigEndian.PutUint16(head[h.CsumOff:], pkt.Fold(pkt.PseudoSum(head[h.L3:], h.IPv6, h.Proto, l4)))
		popts |= txdPoptTXSM
		tucso = h.CsumOff
		if h.Proto == pkt.ProtoTCP {
			tucmd |= txdCmdTCP
		}
	}
	if !h.IPv6 {
		tucmd |= txdCmdIP
	}
	if popts == 0 {
		return ctx, 0, nil
	}
	ctx[0] = uint32(h.L3) | uint32(h.L3+10)<<8 | uint32(ipEnd)<<16
	ctx[1] = uint32(h.L4) | uint32(tucso)<<8
	ctx[2] = txdCmdDEXT | txdDTypC | tucmd
	return ctx, popts, nil
}

// TransmitGSO queues one TCP packet (hdr: its Ethernet, IP and TCP
// headers; payload: views referenced in place) for segmentation by the
// controller at o.MSS: one TSO context descriptor, the header (copied into
// the driver's slot, with IPv4 total length and header checksum zeroed,
// IPv6 payload length zeroed and the TCP checksum seeded with the
// pseudo-header sum without length, as Linux e1000_tso does), then the
// payload. A packet that fits one segment goes as a frame with checksum
// insertion instead.
func (n *NIC) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	bad := func(format string, a ...any) error {
		return n.txError(fmt.Errorf("e1000e: GSO: "+format+": %w", append(a, ErrFrame)...))
	}
	if o.Type != tso.TCP {
		return bad("type %v: only TCP is segmented in hardware", o.Type)
	}
	h, err := pkt.Parse(hdr)
	if err != nil || h.Proto != pkt.ProtoTCP || h.Fragment || h.L4+20 > len(hdr) {
		return bad("headers (%v)", err)
	}
	if thl := int(hdr[h.L4+12]>>4) * 4; thl < 20 || h.L4+thl != len(hdr) || len(hdr) > hdrSlot {
		return bad("TCP header of %d bytes in %d bytes of headers", thl, len(hdr))
	}
	plen := 0
	for _, p := range payload {
		plen += len(p)
	}
	if o.MSS < tso.MinTCPMSS || o.MSS > n.MaxFrame()-len(hdr) {
		return bad("MSS %d", o.MSS)
	}
	if len(hdr)-h.L3+plen > 65535+boolInt(h.IPv6)*40 {
		return bad("%d bytes of payload", plen)
	}
	if plen <= o.MSS {
		// One segment: checksum insertion without segmentation.
		var buf [hdrSlot]byte
		hc := buf[:len(hdr)]
		copy(hc, hdr)
		n.fixLengths(hc, h, plen)
		return n.transmitOwnedHeader(hc, payload, plen, cookie)
	}
	segs := (plen + o.MSS - 1) / o.MSS
	var buf [hdrSlot]byte
	hc := buf[:len(hdr)]
	copy(hc, hdr)
	var tucmd uint32 = txdCmdTSE | txdCmdTCP
	ipEnd := 0
	popts := uint32(txdPoptTXSM)
	if !h.IPv6 {
		binary.BigEndian.PutUint16(hc[h.L3+2:], 0)
		binary.BigEndian.PutUint16(hc[h.L3+10:], 0)
		tucmd |= txdCmdIP
		ipEnd = h.L4 - 1
		popts |= txdPoptIXSM
	} else {
		binary.BigEndian.PutUint16(hc[h.L3+4:], 0)
	}
	binary.BigEndian.PutUint16(hc[h.L4+16:], pkt.Fold(pkt.PseudoSum(hc[h.L3:], h.IPv6, pkt.ProtoTCP, 0)))
	n.txMu.Lock()
	defer n.txMu.Unlock()
	if n.closed.Load() {
		return ErrClosed
	}
	need := 2 + descsFor(payload)
	if need > n.tx.n-1 || need-1 > MaxDataDescs {
		return n.txError(fmt.Errorf("e1000e: GSO packet needs %d descriptors (%d data, at most %d), ring has %d: %w", need, need-1, MaxDataDescs, n.tx.n, ErrFrame))
	}
	if need > n.tx.free() {
		n.count(func(s *Stats) { s.Tx.RingFull++ })
		return ErrRingFull
	}
	first := n.tx.putCtx(uint32(h.L3)|uint32(h.L3+10)<<8|uint32(ipEnd)<<16,
		uint32(h.L4)|uint32(h.L4+16)<<8,
		uint32(plen)&txdLenMask|txdDTypC|txdCmdDEXT|tucmd,
		uint32(len(hdr))<<8|uint32(o.MSS)<<16)
	n.tx.slots[first].segs = segs
	if err := n.putData(first, hc, payload, txdCmdDEXT|txdDTypD|txdCmdIFCS|txdCmdTSE, popts, cookie); err != nil {
		return err
	}
	n.count(func(s *Stats) {
		s.Tx.Frames++
		s.Tx.Bytes += uint64(len(hdr) + plen)
		s.Tx.Descs += uint64(need)
		s.Tx.Contexts++
		s.Tx.GSOPackets++
		s.Tx.GSOSegs += uint64(segs)
		s.Tx.Copied += uint64(len(hdr))
	})
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fixLengths sets the IP length fields of a header for plen payload bytes.
func (n *NIC) fixLengths(hc []byte, h pkt.Headers, plen int) {
	if h.IPv6 {
		binary.BigEndian.PutUint16(hc[h.L3+4:], uint16(len(hc)-h.L3-40+plen))
	} else {
		binary.BigEndian.PutUint16(hc[h.L3+2:], uint16(len(hc)-h.L3+plen))
	}
}

// transmitOwnedHeader sends a one-segment GSO packet: the header (a copy
// the driver may rewrite) goes into the header slot with a checksum
// context.
func (n *NIC) transmitOwnedHeader(hc []byte, payload [][]byte, plen int, cookie any) error {
	ctx, popts, err := csumContext(hc, len(hc)+plen)
	if err != nil {
		return n.txError(err)
	}
	n.txMu.Lock()
	defer n.txMu.Unlock()
	if n.closed.Load() {
		return ErrClosed
	}
	need := 2 + descsFor(payload)
	if need > n.tx.n-1 || need-1 > MaxDataDescs {
		return n.txError(fmt.Errorf("e1000e: packet needs %d descriptors (%d data, at most %d), ring has %d: %w", need, need-1, MaxDataDescs, n.tx.n, ErrFrame))
	}
	if need > n.tx.free() {
		n.count(func(s *Stats) { s.Tx.RingFull++ })
		return ErrRingFull
	}
	first := n.tx.putCtx(ctx[0], ctx[1], ctx[2], ctx[3])
	if err := n.putData(first, hc, payload, txdCmdDEXT|txdDTypD|txdCmdIFCS, popts, cookie); err != nil {
		return err
	}
	n.count(func(s *Stats) {
		s.Tx.Frames++
		s.Tx.Bytes += uint64(len(hc) + plen)
		s.Tx.Descs += uint64(need)
		s.Tx.Contexts++
		s.Tx.CsumFrames++
		s.Tx.GSOPackets++
		s.Tx.GSOSegs++
		s.Tx.Copied += uint64(len(hc))
	})
	return nil
}

// reclaim completes packets whose last descriptor the device wrote back
// (DD) and calls OnTxDone for each, outside the lock.
//
// cbMu is held from collecting to delivering, so Close cannot return
// while completions it did not deliver are still on their way.
func (n *NIC) reclaim() int {
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	var done [32]any
	k, total := 0, 0
	for {
		n.txMu.Lock()
		t := &n.tx
		k = 0
		for t.used > 0 && k < len(done) {
			i := t.clean
			end := t.slots[i].end
			if t.load(end, 3)&txdStaDD == 0 {
				break
			}
			cnt := (end-i+t.n)%t.n + 1
			for j := 0; j < cnt; j++ {
				t.release(n.cfg.Mem, (i+j)%t.n)
			}
			done[k] = t.slots[i].cookie
			t.slots[i].cookie, t.slots[i].segs = nil, 0
			k++
			t.clean = (end + 1) % t.n
			t.used -= cnt
		}
		cb := n.cfg.OnTxDone
		n.txMu.Unlock()
		if k > 0 {
			n.count(func(s *Stats) { s.Tx.Completed += uint64(k) })
		}
		for j := 0; j < k; j++ {
			if cb != nil {
				cb(done[j], nil)
			}
			done[j] = nil
		}
		total += k
		if k < len(done) {
			return total
		}
	}
}

// TxInFlight returns the descriptors the device owns or has not been
// reclaimed.
func (n *NIC) TxInFlight() int {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	return n.tx.used
}

// txError counts a refused frame or packet in Tx.Errors and returns err.
func (n *NIC) txError(err error) error {
	n.count(func(s *Stats) { s.Tx.Errors++ })
	return err
}
