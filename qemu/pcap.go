package qemu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

// TCPFrame is one IPv4 TCP segment of a pcap file (Options.Pcap): its
// headers and the captured start of its payload.
type TCPFrame struct {
	// N is the frame's number in the file (from 1) and At its time after
	// the file's first frame.
	N  int
	At time.Duration
	// Src and Dst are the segment's addresses and ports.
	Src, Dst netip.AddrPort
	// Seq, Ack, Flags and Win are the TCP header's fields (Win unscaled).
	Seq, Ack uint32
	Flags    uint8
	Win      uint16
	// Len is the payload length the IP header gives; Payload is the part
	// of it the capture kept.
	Len     int
	Payload []byte
}

// TCP header flags (RFC 9293 section 3.1).
const (
	tcpFIN = 1 << 0
	tcpSYN = 1 << 1
	tcpRST = 1 << 2
	tcpPSH = 1 << 3
	tcpACK = 1 << 4
)

func (f TCPFrame) flags() string {
	var b strings.Builder
	for i, c := range "FSRPA" {
		if f.Flags&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// ReadPcapTCP reads the IPv4 TCP segments of a classic pcap file of
// Ethernet frames (what QEMU's filter-dump writes) for which keep returns
// true (nil: all). Frames cut before the end of their TCP header are
// skipped; a file cut in the middle of a record ends the list without an
// error (QEMU may still be writing it).
func ReadPcapTCP(r io.Reader, keep func(*TCPFrame) bool) ([]TCPFrame, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var gh [24]byte
	if _, err := io.ReadFull(br, gh[:]); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(gh[:]) {
	case 0xa1b2c3d4:
		bo = binary.LittleEndian
	case 0xd4c3b2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("pcap header: magic %#x is not a microsecond pcap", gh[:4])
	}
	if lt := bo.Uint32(gh[20:]); lt != 1 {
		return nil, fmt.Errorf("pcap header: link type %d, want 1 (Ethernet)", lt)
	}
	var out []TCPFrame
	var t0 time.Time
	var rh [16]byte
	for n := 1; ; n++ {
		if _, err := io.ReadFull(br, rh[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil
			}
			return out, fmt.Errorf("pcap record %d: %w", n, err)
		}
		incl := bo.Uint32(rh[8:])
		if incl > 1<<16 {
			return out, fmt.Errorf("pcap record %d: %d bytes captured", n, incl)
		}
		b := make([]byte, incl)
		if _, err := io.ReadFull(br, b); err != nil {
			return out, nil
		}
		at := time.Unix(int64(bo.Uint32(rh[0:])), int64(bo.Uint32(rh[4:]))*1000)
		if n == 1 {
			t0 = at
		}
		f, ok := parseTCP(b)
		if !ok {
			continue
		}
		f.N, f.At = n, at.Sub(t0)
		if keep == nil || keep(&f) {
			out = append(out, f)
		}
	}
}

// parseTCP decodes an Ethernet frame holding an IPv4 TCP segment.
func parseTCP(b []byte) (TCPFrame, bool) {
	var f TCPFrame
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		return f, false
	}
	ip := b[14:]
	ihl := int(ip[0]&0xf) * 4
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != 6 || len(ip) < ihl+20 {
		return f, false
	}
	total := int(binary.BigEndian.Uint16(ip[2:]))
	src, _ := netip.AddrFromSlice(ip[12:16])
	dst, _ := netip.AddrFromSlice(ip[16:20])
	tcp := ip[ihl:]
	doff := int(tcp[12]>>4) * 4
	f.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:]))
	f.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:]))
	f.Seq = binary.BigEndian.Uint32(tcp[4:])
	f.Ack = binary.BigEndian.Uint32(tcp[8:])
	f.Flags = tcp[13]
	f.Win = binary.BigEndian.Uint16(tcp[14:])
	f.Len = total - ihl - doff
	if len(tcp) > doff {
		f.Payload = tcp[doff:]
	}
	return f, true
}

// patternIndex finds where a run of bytes sits in app.Pattern (which
// repeats every 64 KiB): the offsets at which its first 8 bytes occur.
type patternIndex map[uint64][]int

func newPatternIndex() patternIndex {
	p := app.Pattern
	ix := make(patternIndex, len(p))
	for i := range p {
		var k [8]byte
		for j := range k {
			k[j] = p[(i+j)%len(p)]
		}
		v := binary.BigEndian.Uint64(k[:])
		ix[v] = append(ix[v], i)
	}
	return ix
}

// patternAt tells whether b is the pattern stream at offset off (modulo
// its period).
func patternAt(b []byte, off int) bool {
	p := app.Pattern
	for j := range b {
		if p[(off+j)%len(p)] != b[j] {
			return false
		}
	}
	return true
}

// offset returns the offset modulo len(app.Pattern) at which b (at least
// 8 bytes) continues the pattern stream, or -1.
func (ix patternIndex) offset(b []byte) int {
	if len(b) < 8 {
		return -1
	}
	p := app.Pattern
next:
	for _, o := range ix[binary.BigEndian.Uint64(b)] {
		for j := range b {
			if p[(o+j)%len(p)] != b[j] {
				continue next
			}
		}
		return o
	}
	return -1
}

// PcapConn is what ScanPcap found of one TCP connection between the
// guest (the side with the lower port: its services) and a peer.
type PcapConn struct {
	// Tuple is peer>guest; N numbers the connections on one tuple (a new
	// SYN with another sequence number starts the next).
	Tuple string
	N     int
	// PeerISN and GuestISN are the two SYNs' sequence numbers.
	PeerISN, GuestISN uint32
	// Frames is the number of segments; Sent the highest stream offset
	// the checked side's data reached, relative to its SYN.
	Frames int
	Sent   int64
	// Misplaced counts data segments of the checked side (the peer's to
	// the sink, the guest's from the source) whose captured bytes are not
	// the pattern at the offset their sequence number gives; OverAck
	// counts acknowledgements of the checked side's data beyond what it
	// had sent (its FIN aside).
	Misplaced, OverAck int
	// First is the first anomaly's line.
	First string
	// GuestSYNAgain counts the guest's SYN-ACKs after its first: each
	// makes QEMU's slirp (tcp_mss, called for the MSS option of any SYN)
	// empty the connection's send buffer, docs/qemu-soak-corruption.md.
	GuestSYNAgain int
}

// Verdict names the layer a connection's anomalies point to, or "".
func (c *PcapConn) Verdict() string {
	var v []string
	if c.Misplaced > 0 {
		who := "the peer (QEMU's user network)"
		if strings.HasSuffix(c.Tuple, fmt.Sprintf(":%d", app.SourcePort)) {
			who = "the firmware"
		}
		v = append(v, fmt.Sprintf("%s sent bytes other than their sequence numbers say, on the wire before the other side saw them", who))
	}
	if c.OverAck > 0 {
		who := "the firmware"
		if strings.HasSuffix(c.Tuple, fmt.Sprintf(":%d", app.SourcePort)) {
			who = "the peer (QEMU's user network)"
		}
		v = append(v, who+" acknowledged data never sent to it")
	}
	if c.GuestSYNAgain > 0 && c.Misplaced > 0 {
		v = append(v, fmt.Sprintf("after %d retransmitted SYN-ACK(s) of the firmware, whose MSS option makes slirp's tcp_mss empty its send buffer (docs/qemu-soak-corruption.md)", c.GuestSYNAgain))
	}
	return strings.Join(v, "; ")
}

// ScanPcap reads a pcap of the firmware's network (Options.Pcap) and
// checks every TCP connection to the sink or from the source: the
// pattern bytes each data segment carries against its sequence number,
// and the other side's acknowledgements against what was sent. With
// port non-zero, it writes one line per segment of that peer port's
// connections to w: time, frame number, direction, flags, sequence and
// acknowledgement numbers raw and relative to the connection's two
// SYNs, payload length, window and, for checked data, where its bytes
// sit in the pattern (modulo its 64 KiB period).
func ScanPcap(pcap string, port uint16, w io.Writer) ([]*PcapConn, error) {
	fh, err := os.Open(pcap)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	ix := newPatternIndex()
	type state struct {
		c       *PcapConn
		haveISN bool
		max     uint32 // relative end of the checked side's data
	}
	conns := map[string]*state{}
	var out []*PcapConn
	_, err = ReadPcapTCP(fh, func(f *TCPFrame) bool {
		fromPeer := f.Src.Port() > f.Dst.Port()
		peer, guest := f.Src, f.Dst
		if !fromPeer {
			peer, guest = f.Dst, f.Src
		}
		checked := guest.Port() == app.SinkPort && fromPeer || guest.Port() == app.SourcePort && !fromPeer
		if guest.Port() != app.SinkPort && guest.Port() != app.SourcePort {
			return false
		}
		key := peer.String() + ">" + guest.String()
		s := conns[key]
		if fromPeer && f.Flags&tcpSYN != 0 && f.Flags&tcpACK == 0 && (s == nil || f.Seq != s.c.PeerISN) {
			n := 1
			if s != nil {
				n = s.c.N + 1
			}
			s = &state{c: &PcapConn{Tuple: key, N: n, PeerISN: f.Seq}}
			conns[key] = s
			out = append(out, s.c)
		}
		detail := port != 0 && peer.Port() == port && w != nil
		if s == nil {
			if detail {
				fmt.Fprintf(w, "%10.6f %7d %-38s %-5s seq %d ack %d len %d win %d (no SYN seen)\n",
					f.At.Seconds(), f.N, f.Src.String()+">"+f.Dst.String(), f.flags(), f.Seq, f.Ack, f.Len, f.Win)
			}
			return false
		}
		c := s.c
		c.Frames++
		if !fromPeer && f.Flags&tcpSYN != 0 {
			if s.haveISN && f.Seq == c.GuestISN {
				c.GuestSYNAgain++
			}
			c.GuestISN, s.haveISN = f.Seq, true
		}
		dir := "peer>guest"
		rs, ra := f.Seq-c.PeerISN, f.Ack-c.GuestISN
		if !fromPeer {
			dir = "guest>peer"
			rs, ra = f.Seq-c.GuestISN, f.Ack-c.PeerISN
		}
		note := ""
		if checked && f.Len > 0 {
			// The stream offset of the first payload byte is rs-1.
			want := int((rs - 1) % uint32(len(app.Pattern)))
			if end := rs + uint32(f.Len); int32(end-s.max) > 0 {
				s.max = end
				c.Sent = int64(end) - 1
			}
			b := f.Payload[:min(len(f.Payload), f.Len)]
			if patternAt(b, want) {
				note = fmt.Sprintf(" pattern@%d", want)
			} else {
				c.Misplaced++
				note = fmt.Sprintf(" MISPLACED: bytes at pattern offset %d, sequence says %d", ix.offset(b), want)
			}
		}
		// The acknowledgement of the checked side's data, one over its
		// last byte when that was its FIN.
		if !checked && s.haveISN && f.Flags&tcpACK != 0 && f.Flags&tcpSYN == 0 && int32(ra-s.max) > 1 {
			c.OverAck++
			note += fmt.Sprintf(" ACKS UNSENT DATA: sent up to %d", s.max)
		}
		line := fmt.Sprintf("%10.6f %7d #%d %s %-5s seq %d (rel %d) ack %d (rel %d) len %d win %d%s",
			f.At.Seconds(), f.N, c.N, dir, f.flags(), f.Seq, rs, f.Ack, ra, f.Len, f.Win, note)
		if c.First == "" && (strings.Contains(note, "MISPLACED") || strings.Contains(note, "UNSENT")) {
			c.First = key + " " + line
		}
		if detail {
			fmt.Fprintln(w, line)
		}
		return false
	})
	return out, err
}
