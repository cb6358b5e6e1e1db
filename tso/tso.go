// Package tso segments one large outbound packet into wire-size packets
// without copying its payload: software TSO for TCP over IPv4 and IPv6, UDP
// fragmentation offload (one datagram as IP fragments) and UDP GSO (one
// buffer as separate datagrams).
//
// The input is the packet's headers (Ethernet, optional 802.1Q tags, IP with
// options or extension headers, TCP or UDP), contiguous, plus its payload as
// views in any layout. Options are shaped like gVisor's stack.GSO. The
// output is produced one segment at a time by Next: a freshly built header
// written into a slot the caller supplies (aligned DMA memory, typically the
// slot of the segment's first descriptor), and payload pieces that are
// sub-slices of the original views. No payload byte is copied; in software
// checksum mode payload bytes are read once.
//
// What gVisor leaves in the transport checksum field of a host-GSO packet
// (NeedsCsum) is the folded, uncomplemented pseudo-header sum over the whole
// packet's transport length. The segmenter never trusts that value: every
// segment's checksum field is rebuilt from scratch for the chosen Csum mode.
package tso

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/internal/pkt"
)

// Type is the kind of segmentation.
type Type int

// Segmentation types.
const (
	// None passes the packet through as one frame (finishing its checksum
	// when NeedsCsum is set).
	None Type = iota
	// TCP cuts the payload at MSS into TCP segments (IPv4 or IPv6).
	TCP
	// UDPFragment sends one UDP datagram as IP fragments whose payload is at
	// most MSS bytes (rounded down to a multiple of 8); the UDP header
	// travels only in the first fragment.
	UDPFragment
	// UDPGSO cuts the payload at MSS into separate UDP datagrams.
	UDPGSO
)

func (t Type) String() string {
	switch t {
	case None:
		return "none"
	case TCP:
		return "tcp"
	case UDPFragment:
		return "udp-fragment"
	case UDPGSO:
		return "udp-gso"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Csum says who completes checksums.
type Csum int

// Checksum modes.
const (
	// Software: the segmenter computes the IPv4 header and transport
	// checksums of every segment.
	Software Csum = iota
	// HardwareZero: the NIC inserts the IPv4 header and transport checksums
	// over zeroed fields (the i.MX ENET: PINS/IINS). Fragments other than
	// the first carry no transport header; the datagram's UDP checksum is
	// then computed in software, the IPv4 header checksum by the NIC.
	HardwareZero
	// HardwarePseudo: the NIC completes a transport checksum seeded with
	// the segment's pseudo-header sum (virtio, ConnectX LSO); the IPv4
	// header checksum is computed in software.
	HardwarePseudo
)

// Options describe one packet's segmentation, after gVisor's stack.GSO.
type Options struct {
	Type Type
	// MSS is the payload per segment (TCP, UDP GSO) or the largest IP
	// payload per fragment (UDPFragment).
	MSS int
	// NeedsCsum: the transport checksum field holds a partial sum, not a
	// checksum (gVisor host GSO). Segmented packets are rebuilt anyway;
	// this matters for a packet passed through unsegmented.
	NeedsCsum bool
	// CsumOffset is the checksum field's offset in the transport header
	// when set (gVisor's value, checked against the protocol's: 16 for TCP,
	// 6 for UDP).
	CsumOffset int
	// Csum selects who completes checksums.
	Csum Csum
	// FragID is the IPv6 fragment identification for UDPFragment.
	FragID uint32
}

// Limits.
const (
	// MinTCPMSS is the smallest TCP MSS accepted: what gVisor's sender may
	// use, its smallest peer MSS (header.TCPMinimumSendMSS, 48) less the
	// 40 bytes of options it reserves. (It was Linux's TCP_MIN_MSS, 88, and
	// every GSO packet of a connection whose peer advertised an MSS below
	// 128 was refused.)
	MinTCPMSS = 8
	// MinUDPMSS is the smallest UDP payload or fragment size accepted.
	MinUDPMSS = 8
	// MaxSegments bounds the segments of one packet.
	MaxSegments = 1024
	// MaxPacket is the largest IP datagram (IPv4 total length; IPv6
	// payload length without jumbograms).
	MaxPacket = 65535
)

// Errors; every error wraps one of these.
var (
	ErrHeader      = errors.New("tso: malformed or unsupported headers")
	ErrMSS         = errors.New("tso: MSS out of range")
	ErrTooBig      = errors.New("tso: packet too large")
	ErrType        = errors.New("tso: segmentation type does not match the headers")
	ErrSlot        = errors.New("tso: header slot too small")
	ErrFragmentDF  = errors.New("tso: IPv4 datagram has DF set and cannot be fragmented")
	ErrUnsupported = errors.New("tso: unsupported header combination")
	ErrDone        = errors.New("tso: no more segments")
)

// Segment is one outbound packet.
type Segment struct {
	// Header is the segment's L2-L4 header, written into the slot given to
	// Next.
	Header []byte
	// Payload are pieces of the original views, in order. The slice (not
	// the bytes) is reused by the next call to Next.
	Payload [][]byte
	// Len is the frame length: header plus payload.
	Len int
	// PayloadLen is the payload length.
	PayloadLen int
	// InsertIPCsum and InsertL4Csum ask the NIC to insert the IPv4 header
	// checksum and the transport checksum.
	InsertIPCsum, InsertL4Csum bool
	// Index is the segment's position; Last is set on the final one.
	Index int
	Last  bool
}

// Segmenter walks one packet. The zero value is ready for Init; reuse it
// across packets to avoid allocation.
type Segmenter struct {
	hdr     []byte
	payload [][]byte
	o       Options
	h       pkt.Headers
	l4len   int // transport header length (TCP or UDP), 0 for fragments' later pieces
	total   int // payload bytes
	count   int
	next    int
	done    int // payload bytes consumed
	view    int // payload cursor
	voff    int
	pieces  [][]byte
	udpCsum uint16 // UFO: the datagram's checksum
	fragHdr int    // UFO IPv6: where the fragment header goes
	whole   bool   // UFO IPv6: the datagram fits one packet; no fragment header
	// tcp4HW: TCP over IPv4 with both checksums left to the MAC, the
	// common TSO case, whose segment headers segment builds in one call.
	tcp4HW bool
}

// Init prepares segmentation of the packet hdr+payload. hdr holds exactly
// the L2-L4 headers; payload the rest, in any number of views.
func (s *Segmenter) Init(hdr []byte, payload [][]byte, o Options) error {
	*s = Segmenter{hdr: hdr, payload: payload, o: o, pieces: s.pieces[:0]}
	h, err := pkt.Parse(hdr)
	if err != nil && err != pkt.ErrTruncated {
		return fmt.Errorf("%w: %v", ErrHeader, err)
	}
	if err == pkt.ErrTruncated || h.L4 > len(hdr) {
		return fmt.Errorf("%w: headers truncated at %d bytes", ErrHeader, len(hdr))
	}
	if h.Fragment {
		return fmt.Errorf("%w: packet is already an IP fragment", ErrHeader)
	}
	s.h = h
	for _, v := range payload {
		s.total += len(v)
	}
	switch h.Proto {
	case pkt.ProtoTCP:
		if len(hdr) < h.L4+20 {
			return fmt.Errorf("%w: TCP header truncated", ErrHeader)
		}
		s.l4len = int(hdr[h.L4+12]>>4) * 4
		if s.l4len < 20 {
			return fmt.Errorf("%w: TCP data offset %d", ErrHeader, s.l4len)
		}
	case pkt.ProtoUDP:
		s.l4len = 8
	default:
		return fmt.Errorf("%w: transport protocol %d", ErrUnsupported, h.Proto)
	}
	if len(hdr) != h.L4+s.l4len {
		return fmt.Errorf("%w: %d header bytes, headers end at %d", ErrHeader, len(hdr), h.L4+s.l4len)
	}
	if o.CsumOffset != 0 && o.CsumOffset != h.CsumOff-h.L4 {
		return fmt.Errorf("%w: checksum offset %d, protocol's is %d", ErrHeader, o.CsumOffset, h.CsumOff-h.L4)
	}
	ipLen := len(hdr) - h.L3 + s.total
	if ipLen > MaxPacket+40*b2i(h.IPv6) {
		return fmt.Errorf("%w: %d bytes of IP", ErrTooBig, ipLen)
	}
	switch o.Type {
	case None:
		s.count = 1
	case TCP:
		if h.Proto != pkt.ProtoTCP {
			return fmt.Errorf("%w: TCP segmentation of protocol %d", ErrType, h.Proto)
		}
		if o.MSS < MinTCPMSS || o.MSS > MaxPacket {
			return fmt.Errorf("%w: TCP MSS %d (minimum %d)", ErrMSS, o.MSS, MinTCPMSS)
		}
		s.count = max(1, (s.total+o.MSS-1)/o.MSS)
	case UDPGSO:
		if h.Proto != pkt.ProtoUDP {
			return fmt.Errorf("%w: UDP GSO of protocol %d", ErrType, h.Proto)
		}
		if o.MSS < MinUDPMSS || o.MSS > MaxPacket {
			return fmt.Errorf("%w: UDP GSO size %d", ErrMSS, o.MSS)
		}
		s.count = max(1, (s.total+o.MSS-1)/o.MSS)
	case UDPFragment:
		if err := s.initFragments(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %v", ErrType, o.Type)
	}
	if s.count > MaxSegments {
		return fmt.Errorf("%w: %d segments (max %d)", ErrTooBig, s.count, MaxSegments)
	}
	s.tcp4HW = o.Type == TCP && !h.IPv6 && o.Csum == HardwareZero && (s.count > 1 || o.NeedsCsum)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Count returns the number of segments the packet becomes.
func (s *Segmenter) Count() int { return s.count }

// HeaderLen returns the header length of segment i (the first UDP fragment
// carries the UDP header; later ones do not; IPv6 fragments carry 8 more).
func (s *Segmenter) HeaderLen(i int) int {
	n := len(s.hdr)
	if s.o.Type == UDPFragment && !s.whole {
		if i > 0 {
			n -= s.l4len
		}
		if s.h.IPv6 {
			n += 8
		}
	}
	return n
}

// take returns the next n payload bytes as pieces of the views.
func (s *Segmenter) take(n int) [][]byte {
	s.pieces = s.pieces[:0]
	for n > 0 && s.view < len(s.payload) {
		v := s.payload[s.view][s.voff:]
		k := min(n, len(v))
		if k > 0 {
			s.pieces = append(s.pieces, v[:k])
		}
		n -= k
		s.voff += k
		if s.voff == len(s.payload[s.view]) {
			s.view++
			s.voff = 0
		}
	}
	return s.pieces
}

// Next builds the next segment's header in slot and fills seg. It returns
// ErrDone after the last segment.
func (s *Segmenter) Next(slot []byte, seg *Segment) error {
	if s.next >= s.count {
		return ErrDone
	}
	i := s.next
	hl := s.HeaderLen(i)
	if len(slot) < hl {
		return fmt.Errorf("%w: %d bytes for a %d-byte header", ErrSlot, len(slot), hl)
	}
	// Field by field: assigning a whole Segment zeroes it first with a
	// runtime.duffzero call on GOARM=7.
	seg.Header, seg.Payload = nil, nil
	seg.Len, seg.PayloadLen = 0, 0
	seg.InsertIPCsum, seg.InsertL4Csum = false, false
	seg.Index, seg.Last = i, i == s.count-1
	hdr := slot[:hl]
	switch s.o.Type {
	case UDPFragment:
		s.fragment(i, hdr, seg)
	default:
		n := s.total - s.done
		if s.o.Type != None {
			n = min(n, s.o.MSS)
		}
		seg.Payload = s.take(n)
		seg.PayloadLen = n
		s.segment(i, hdr, n, seg)
		s.done += n
	}
	seg.Header = hdr
	seg.Len = hl + seg.PayloadLen
	s.next++
	return nil
}

// segment builds a TCP segment or UDP datagram header carrying n payload
// bytes.
func (s *Segmenter) segment(i int, hdr []byte, n int, seg *Segment) {
	h := &s.h // a pointer: copying the nine-word Headers is a runtime.duffcopy call on GOARM=7
	copy(hdr, s.hdr)
	if s.tcp4HW {
		// What ipHeader, the TCP case below, finishL4 and finishIP do for
		// this mode, without their calls (about 100 instructions a segment
		// on GOARM=7).
		ip := hdr[h.L3 : h.L3+20]
		ipLen := len(hdr) - h.L3 + n
		binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen))
		binary.BigEndian.PutUint16(ip[4:6], binary.BigEndian.Uint16(ip[4:6])+uint16(i))
		ip[10], ip[11] = 0, 0
		t := hdr[h.L4 : h.L4+20]
		binary.BigEndian.PutUint32(t[4:8], binary.BigEndian.Uint32(t[4:8])+uint32(s.done))
		const fin, psh, cwr = 0x01, 0x08, 0x80
		flags := t[13]
		if !seg.Last {
			flags &^= fin | psh
		}
		if i > 0 {
			flags &^= cwr
		}
		t[13] = flags
		c := hdr[h.CsumOff : h.CsumOff+2]
		c[0], c[1] = 0, 0
		seg.InsertIPCsum, seg.InsertL4Csum = true, true
		return
	}
	l4 := hdr[h.L4:]
	pass := s.o.Type == None || s.count == 1 && !s.o.NeedsCsum && s.o.Type != UDPGSO
	s.ipHeader(i, hdr, len(hdr)-h.L3+n, -1, false)
	switch h.Proto {
	case pkt.ProtoTCP:
		seq := binary.BigEndian.Uint32(l4[4:])
		binary.BigEndian.PutUint32(l4[4:], seq+uint32(s.done))
		flags := l4[13]
		const fin, psh, cwr = 0x01, 0x08, 0x80
		if !seg.Last {
			flags &^= fin | psh
		}
		if i > 0 {
			flags &^= cwr
		}
		l4[13] = flags
	case pkt.ProtoUDP:
		binary.BigEndian.PutUint16(l4[4:], uint16(8+n))
	}
	if pass && !s.o.NeedsCsum {
		// A complete packet with a complete transport checksum: the NIC must
		// not touch it, so the IPv4 header checksum is done here too.
		s.softIP(hdr)
		return
	}
	s.finishL4(hdr, seg.Payload, s.l4len+n, seg)
	s.finishIP(hdr, seg)
}

// ipHeader rewrites the IP length fields (and the IPv4 ID and fragment
// field) for a packet of ipLen bytes from the start of the IP header.
// fragOff < 0 means "not a fragment".
func (s *Segmenter) ipHeader(i int, hdr []byte, ipLen, fragOff int, more bool) {
	h := &s.h
	ip := hdr[h.L3:]
	if h.IPv6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(ipLen-40))
		return
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	id := binary.BigEndian.Uint16(s.hdr[h.L3+4:])
	if fragOff < 0 {
		binary.BigEndian.PutUint16(ip[4:], id+uint16(i))
	} else {
		f := binary.BigEndian.Uint16(ip[6:]) &^ 0x3FFF // keep the reserved bit and DF (clear)
		f |= uint16(fragOff / 8)
		if more {
			f |= 0x2000
		}
		binary.BigEndian.PutUint16(ip[6:], f)
	}
}

// finishIP sets the IPv4 header checksum for the mode.
func (s *Segmenter) finishIP(hdr []byte, seg *Segment) {
	h := &s.h
	if h.IPv6 {
		return
	}
	if s.o.Csum == HardwareZero {
		hdr[h.L3+10], hdr[h.L3+11] = 0, 0
		seg.InsertIPCsum = true
		return
	}
	s.softIP(hdr)
}

// softIP computes the IPv4 header checksum of hdr.
func (s *Segmenter) softIP(hdr []byte) {
	h := &s.h
	if h.IPv6 {
		return
	}
	ip := hdr[h.L3:h.L4]
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^pkt.Fold(pkt.Sum(0, ip)))
}

// finishL4 sets the transport checksum of a segment whose transport header
// and payload total l4len bytes.
func (s *Segmenter) finishL4(hdr []byte, payload [][]byte, l4len int, seg *Segment) {
	h := &s.h
	off := h.CsumOff
	hdr[off], hdr[off+1] = 0, 0
	switch s.o.Csum {
	case HardwareZero:
		seg.InsertL4Csum = true
	case HardwarePseudo:
		seg.InsertL4Csum = true
		binary.BigEndian.PutUint16(hdr[off:], pkt.Fold(pkt.PseudoSum(hdr[h.L3:], h.IPv6, h.Proto, l4len)))
	default:
		var a acc
		a.sum = pkt.PseudoSum(hdr[h.L3:], h.IPv6, h.Proto, l4len)
		a.add(hdr[h.L4:])
		for _, p := range payload {
			a.add(p)
		}
		c := ^pkt.Fold(a.sum)
		if c == 0 && h.Proto == pkt.ProtoUDP {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(hdr[off:], c)
	}
}

// acc is a running ones'-complement sum over pieces of odd lengths.
type acc struct {
	sum uint32
	odd bool // a high byte was added; the next byte is its low byte
}

func (a *acc) add(b []byte) {
	if len(b) == 0 {
		return
	}
	if a.odd {
		a.sum += uint32(b[0])
		b = b[1:]
		a.odd = false
	}
	even := len(b) &^ 1
	a.sum = uint32(pkt.Fold(pkt.Sum(a.sum, b[:even])))
	if len(b)&1 != 0 {
		a.sum += uint32(b[len(b)-1]) << 8
		a.odd = true
	}
}
