package pkt

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzParse checks Parse against gopacket: it never panics, and whenever
// gopacket decodes an unfragmented TCP or UDP packet, Parse finds the same
// transport header and checksum field.
func FuzzParse(f *testing.F) {
	eth := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}
	v4 := append(append([]byte{}, eth...), 0x08, 0x00, 0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2)
	v4 = append(v4, make([]byte, 20)...)
	v4[14+20+12] = 0x50
	f.Add(v4)
	v6 := append(append([]byte{}, eth...), 0x86, 0xDD, 0x60, 0, 0, 0, 0, 8, 17, 64)
	v6 = append(v6, make([]byte, 32+8)...)
	binary.BigEndian.PutUint16(v6[14+40+4:], 8)
	f.Add(v6)
	vlan := append(append([]byte{}, eth...), 0x81, 0x00, 0, 42)
	vlan = append(vlan, v4[12:]...)
	f.Add(vlan)
	ext := append(append([]byte{}, eth...), 0x86, 0xDD, 0x60, 0, 0, 0, 0, 16, 0, 64)
	ext = append(ext, make([]byte, 32)...)
	ext = append(ext, 17, 0, 0, 0, 0, 0, 0, 0) // hop-by-hop, then UDP
	ext = append(ext, make([]byte, 8)...)
	f.Add(ext)
	// Every IPv6 header number gVisor knows as an extension header, then
	// UDP; 253 also with a length field gVisor ignores.
	for _, x := range []byte{0, 43, 44, 59, 60, 253, 254} {
		f.Add(v6Frame(x, append([]byte{17, 0, 0, 0, 0, 0, 0, 0}, 0, 9, 0, 9, 0, 8, 0, 0)))
	}
	f.Add(v6Frame(253, append([]byte{17, 1, 0, 0, 0, 0, 0, 0}, 0, 9, 0, 9, 0, 8, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0)))
	f.Add(v6Frame(44, append([]byte{253, 0, 0, 1, 0, 0, 0, 7, 17, 0, 0, 0, 0, 0, 0, 0}, 0, 9, 0, 9, 0, 8, 0, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if err != nil {
			return
		}
		if h.L4 > len(b) || h.L3 > h.L4 {
			t.Fatalf("offsets past the frame: %+v len %d", h, len(b))
		}
		if h.IPv6 && !h.Fragment && h.IPEnd <= len(b) {
			// The transport header gVisor finds is the one Parse finds.
			if proto, off, ok := gvisorTransport(b[h.L3:h.IPEnd]); ok && (proto != h.Proto || proto != 59 && h.L3+off != h.L4) {
				t.Fatalf("gVisor walks to protocol %d at %d, Parse to %d at %d", proto, h.L3+off, h.Proto, h.L4)
			}
		}
		p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
		// Compare only what Parse claims: a TCP or UDP header. (gopacket reads
		// IPv4 protocol 0 as an IPv6 hop-by-hop header; Parse does not.)
		if p.ErrorLayer() != nil || h.Fragment || h.VLANs > 1 || h.CsumOff < 0 {
			return
		}
		off := 0
		for _, l := range p.Layers() {
			switch l.LayerType() {
			case layers.LayerTypeTCP, layers.LayerTypeUDP:
				if off != h.L4 {
					t.Fatalf("gopacket puts the transport header at %d, Parse at %d", off, h.L4)
				}
				return
			case layers.LayerTypeIPv6Fragment, layers.LayerTypeIPv6Routing:
				return
			}
			off += len(l.LayerContents())
		}
	})
}

func TestChecksumHelpers(t *testing.T) {
	// RFC 1071 example words.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold(Sum(0, b)); got != 0xddf2 {
		t.Fatalf("sum %#x", got)
	}
	if Fold(Sum(0, []byte{1})) != 0x100 {
		t.Fatal("odd byte not padded")
	}
}

func TestParseRejects(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		make([]byte, 13),
		append(make([]byte, 12), 0x08, 0x06, 0, 0),                                                           // ARP
		append(make([]byte, 12), 0x08, 0x00, 0x45),                                                           // truncated IPv4
		append(make([]byte, 12), 0x08, 0x00, 0x44, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), // IHL 4
		append(make([]byte, 12), 0x86, 0xDD, 0x60),                                                           // truncated IPv6
		append(make([]byte, 12), 0x81, 0x00, 0, 1),                                                           // truncated VLAN
	} {
		if _, err := Parse(b); err == nil {
			t.Fatalf("accepted %x", b)
		}
	}
}

// naiveSum is RFC 1071's loop, one 16-bit word at a time.
func naiveSum(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func TestSumMatchesTheNaiveLoop(t *testing.T) {
	b := make([]byte, 3000)
	for i := range b {
		b[i] = byte(i*7 + i>>3)
	}
	for start := 0; start < 9; start++ {
		for n := 0; n < 200; n++ {
			for _, seed := range []uint32{0, 0xFFFF, 0x1FFFE} {
				if got, want := Fold(Sum(seed, b[start:start+n])), Fold(naiveSum(seed, b[start:start+n])); got != want {
					t.Fatalf("start %d len %d seed %#x: %#x want %#x", start, n, seed, got, want)
				}
			}
		}
	}
	for start := 0; start < 9; start++ {
		for _, n := range []int{1500, 2000, 2991 - start} {
			if got, want := Fold(Sum(7, b[start:start+n])), Fold(naiveSum(7, b[start:start+n])); got != want {
				t.Fatalf("start %d len %d: %#x want %#x", start, n, got, want)
			}
		}
	}
	ff := bytes.Repeat([]byte{0xFF}, 2999)
	if got, want := Fold(Sum(0, ff)), Fold(naiveSum(0, ff)); got != want {
		t.Fatalf("all ones: %#x want %#x", got, want)
	}
}

func TestSumRandomBuffers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		b := make([]byte, r.IntN(3000))
		for j := range b {
			b[j] = byte(r.Uint32())
			if r.IntN(4) == 0 {
				b[j] = 0xFF
			}
		}
		o := min(r.IntN(8), len(b))
		seed := r.Uint32() & 0x1FFFF
		if got, want := Fold(Sum(seed, b[o:])), Fold(naiveSum(seed, b[o:])); got != want {
			t.Fatalf("offset %d length %d seed %#x: %#x want %#x", o, len(b)-o, seed, got, want)
		}
	}
}

// FuzzSum: Sum equals RFC 1071's loop at any offset and length (on ARM
// this checks the assembly against the definition).
func FuzzSum(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xFF}, 300), uint8(2), uint32(0xFFFF))
	f.Add([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0"), uint8(1), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, off uint8, seed uint32) {
		seed &= 0x1FFFF
		o := int(off) % 8
		if o > len(b) {
			return
		}
		if got, want := Fold(Sum(seed, b[o:])), Fold(naiveSum(seed, b[o:])); got != want {
			t.Fatalf("offset %d length %d seed %#x: %#x want %#x", o, len(b)-o, seed, got, want)
		}
	})
}

// checkCopySum copies src into a buffer of junk at every destination
// offset 0-7 and checks the copy, the bytes around it and the sum.
func checkCopySum(t *testing.T, src []byte) {
	t.Helper()
	want := Fold(naiveSum(0, src))
	for o := 0; o < 8; o++ {
		buf := bytes.Repeat([]byte{0xA5}, len(src)+16)
		dst := buf[o : o+len(src)+1] // one spare byte: CopySum must not touch it
		if got := Fold(CopySum(dst, src)); got != want {
			t.Fatalf("length %d dst offset %d: sum %#x want %#x", len(src), o, got, want)
		}
		if !bytes.Equal(dst[:len(src)], src) {
			t.Fatalf("length %d dst offset %d: copy differs", len(src), o)
		}
		for i, c := range buf {
			if (i < o || i >= o+len(src)) && c != 0xA5 {
				t.Fatalf("length %d dst offset %d: byte %d outside the copy changed", len(src), o, i)
			}
		}
	}
}

func TestCopySumEveryAlignment(t *testing.T) {
	b := make([]byte, 3100)
	for i := range b {
		b[i] = byte(i*13 + i>>5)
		if i%11 == 0 {
			b[i] = 0xFF // carries
		}
	}
	for start := 0; start < 8; start++ {
		for n := 0; n < 300; n++ {
			checkCopySum(t, b[start:start+n])
		}
		for _, n := range []int{1460, 1480, 1500, 1512, 2000, 3000} {
			checkCopySum(t, b[start:start+n])
		}
	}
	checkCopySum(t, bytes.Repeat([]byte{0xFF}, 2999))
	defer func() {
		if recover() == nil {
			t.Fatal("a short destination did not panic")
		}
	}()
	CopySum(make([]byte, 99), b[:100])
}

// FuzzCopySum: CopySum copies exactly src and sums it as RFC 1071's loop,
// at any source and destination offset (on ARM, the assembly).
func FuzzCopySum(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xFF}, 300), uint8(2))
	f.Add(bytes.Repeat([]byte("0123456789abcdef"), 95), uint8(6))
	f.Fuzz(func(t *testing.T, b []byte, off uint8) {
		o := int(off) % 8
		if o > len(b) {
			return
		}
		checkCopySum(t, b[o:])
	})
}

// BenchmarkCopySum1500 against BenchmarkCopyThenSum1500: a received frame
// copied to its aligned buffer with its segment summed.
func BenchmarkCopySum1500(b *testing.B) {
	src, dst := make([]byte, 1504), make([]byte, 1504)
	b.SetBytes(1500)
	for b.Loop() {
		CopySum(dst[2:], src[2:1502])
	}
}

func BenchmarkCopyThenSum1500(b *testing.B) {
	src, dst := make([]byte, 1504), make([]byte, 1504)
	b.SetBytes(1500)
	for b.Loop() {
		copy(dst[2:], src[2:1502])
		Sum(0, src[2:1502])
	}
}

func BenchmarkSum1500(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(1500)
	for b.Loop() {
		Sum(0, buf)
	}
}

func TestChecksumVerifiers(t *testing.T) {
	// IPv4/UDP frame: 14 + 20 + 8 + 4 bytes of data.
	f := make([]byte, 46)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, ProtoUDP
	binary.BigEndian.PutUint16(ip[2:], 32)
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ^Fold(Sum(0, ip)))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], 1)
	binary.BigEndian.PutUint16(udp[2:], 2)
	binary.BigEndian.PutUint16(udp[4:], 12)
	copy(udp[8:], "data")
	binary.BigEndian.PutUint16(udp[6:], ^Fold(Sum(PseudoSum(ip, false, ProtoUDP, 12), udp)))
	h, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	// TransportSumOK with the segment's sum must agree with TransportOK.
	both := func() (ok, checked bool) {
		ok, checked = TransportOK(f, &h)
		ok2, checked2 := TransportSumOK(f, &h, Sum(0, f[h.L4:h.IPEnd]))
		if ok2 != ok || checked2 != checked {
			t.Fatalf("TransportSumOK says %v/%v, TransportOK %v/%v", ok2, checked2, ok, checked)
		}
		return ok, checked
	}
	if ok, checked := both(); !IPv4HeaderOK(f, &h) || !ok || !checked {
		t.Fatal("valid frame rejected")
	}
	f[44] ^= 1
	if ok, checked := both(); ok || !checked {
		t.Fatal("corrupt payload accepted")
	}
	if ok, checked := TransportSumOK(f, &h, 0); ok || !checked {
		t.Fatal("a wrong segment sum was accepted")
	}
	binary.BigEndian.PutUint16(udp[6:], 0) // IPv4 UDP without a checksum
	if _, checked := both(); checked {
		t.Fatal("zero UDP checksum was checked")
	}
	ip[8]++
	if IPv4HeaderOK(f, &h) {
		t.Fatal("corrupt IPv4 header accepted")
	}
}

// v6Frame is an Ethernet frame with an IPv6 header whose next header is
// next, followed by body (payload length set from it).
func v6Frame(next byte, body []byte) []byte {
	f := append([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xDD, 0x60, 0, 0, 0, 0, 0, next, 64}, make([]byte, 32)...)
	binary.BigEndian.PutUint16(f[14+4:], uint16(len(body)))
	return append(f, body...)
}

// A chain of any length is walked to the transport header: a UDP header
// behind nine destination-options headers was reported as protocol 60
// with no checksum field, so nobody verified it.
func TestParseWalksLongExtensionChains(t *testing.T) {
	for _, n := range []int{1, 8, 9, 30} {
		var body []byte
		for i := 0; i < n; i++ {
			nh := byte(60)
			if i == n-1 {
				nh = ProtoUDP
			}
			body = append(body, nh, 0, 1, 4, 0, 0, 0, 0) // PadN
		}
		l4 := 14 + 40 + len(body)
		body = append(body, 0, 9, 0, 9, 0, 12, 0, 0, 'a', 'b', 'c', 'd')
		h, err := Parse(v6Frame(60, body))
		if err != nil {
			t.Fatalf("%d headers: %v", n, err)
		}
		if h.Proto != ProtoUDP || h.L4 != l4 || h.CsumOff != l4+6 || h.Fragment {
			t.Fatalf("%d headers: %+v, want UDP at %d", n, h, l4)
		}
	}
}

// In a fragment other than the first, the bytes after the fragment header
// are payload: Parse must not read them as more headers.
func TestParseStopsAtARealFragmentHeader(t *testing.T) {
	// Fragment header (next: destination options), offset 8, then payload
	// bytes that happen to look like a destination-options header.
	body := []byte{60, 0, 0, 8, 0, 0, 0, 1, 17, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	h, err := Parse(v6Frame(44, body))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Fragment || h.L4 != 14+40+8 || h.Proto != 60 || h.CsumOff != -1 {
		t.Fatalf("%+v: want a fragment whose fragmentable part starts at %d with header 60", h, 14+40+8)
	}
	// An atomic fragment (offset 0, M clear) is no fragment: the walk goes
	// on to the transport header.
	body = []byte{17, 0, 0, 0, 0, 0, 0, 1, 0, 9, 0, 9, 0, 8, 0, 0}
	if h, err := Parse(v6Frame(44, body)); err != nil || h.Fragment || h.Proto != ProtoUDP || h.L4 != 14+48 {
		t.Fatalf("atomic fragment: %+v, %v", h, err)
	}
}

// TestPseudoSumMatchesThePseudoHeader: PseudoSum equals RFC 1071's loop
// over the pseudo-header written out (RFC 793 3.1, RFC 8200 8.1) for
// random addresses, protocols and lengths.
func TestPseudoSumMatchesThePseudoHeader(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		v6 := i%2 == 1
		ip := make([]byte, 40)
		for j := range ip {
			ip[j] = byte(r.Uint32())
			if r.IntN(3) == 0 {
				ip[j] = 0xFF
			}
		}
		proto, l4len := r.IntN(256), r.IntN(65536)
		var ph []byte
		if v6 {
			ph = append(append(ph, ip[8:40]...), byte(l4len>>24), byte(l4len>>16), byte(l4len>>8), byte(l4len), 0, 0, 0, byte(proto))
		} else {
			ph = append(append(ph, ip[12:20]...), 0, byte(proto), byte(l4len>>8), byte(l4len))
		}
		if got, want := Fold(PseudoSum(ip, v6, proto, l4len)), Fold(naiveSum(0, ph)); got != want {
			t.Fatalf("v6 %v proto %d len %d: %#x want %#x", v6, proto, l4len, got, want)
		}
	}
}

// gvisorTransport walks the IPv6 datagram ip as gVisor's network layer
// does (header.IPv6PayloadIterator, as network/ipv6 and header/parse use
// it) and returns the upper-layer protocol it finds and its offset in ip,
// 59 for no next header; ok is false for a malformed chain or a fragment
// that is not atomic (whose headers gVisor reads after reassembly).
func gvisorTransport(ip []byte) (proto, off int, ok bool) {
	it := header.MakeIPv6PayloadIterator(header.IPv6ExtensionHeaderIdentifier(ip[6]), buffer.MakeWithData(ip[40:]))
	defer it.Release()
	for {
		eh, done, err := it.Next()
		if err != nil {
			return 0, 0, false
		}
		if done {
			return 59, 0, true
		}
		switch eh := eh.(type) {
		case header.IPv6RawPayloadHeader:
			off = len(ip) - int(eh.Buf.Size())
			eh.Release()
			return int(eh.Identifier), off, true
		case header.IPv6FragmentExtHdr:
			if !eh.IsAtomic() {
				return 0, 0, false
			}
		}
		eh.Release()
	}
}

// Parse walks exactly the IPv6 headers gVisor walks to the transport
// header: each header number gVisor knows, then UDP, and the experiment
// header 253 with a length field gVisor ignores (it reads 253 as 8 bytes).
// Before, Parse stopped at 253 and reported "protocol 253", so the
// endpoint never checked the UDP checksum gVisor then trusted.
func TestParseWalksWhatGVisorWalks(t *testing.T) {
	udp := []byte{0, 9, 0, 9, 0, 8, 0, 0}
	for _, tc := range []struct {
		first byte
		body  []byte
	}{
		{0, append([]byte{17, 0, 1, 4, 0, 0, 0, 0}, udp...)},
		{43, append([]byte{17, 0, 0, 0, 0, 0, 0, 0}, udp...)},
		{44, append([]byte{17, 0, 0, 0, 0, 0, 0, 7}, udp...)}, // atomic
		{59, append([]byte{17, 0, 0, 0, 0, 0, 0, 0}, udp...)},
		{60, append([]byte{17, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, udp...)},
		{253, append([]byte{17, 0, 0xBE, 0xEF, 0, 0, 0, 0}, udp...)},
		{253, append([]byte{17, 2, 0xBE, 0xEF, 0, 0, 0, 0}, append(udp, make([]byte, 16)...)...)},
		{60, append([]byte{253, 0, 1, 4, 0, 0, 0, 0, 17, 0, 0xBE, 0xEF, 0, 0, 0, 0}, udp...)},
		{254, append([]byte{17, 0, 0, 0, 0, 0, 0, 0}, udp...)},
	} {
		f := v6Frame(tc.first, tc.body)
		h, err := Parse(f)
		proto, off, ok := gvisorTransport(f[14:])
		if err != nil || !ok {
			t.Fatalf("header %d: Parse %v, gVisor ok %v", tc.first, err, ok)
		}
		if h.Proto != proto || proto != 59 && h.L4 != 14+off {
			t.Errorf("header %d %x: Parse finds protocol %d at %d, gVisor %d at %d", tc.first, tc.body[:8], h.Proto, h.L4, proto, 14+off)
		}
		if want := proto == ProtoUDP; (h.CsumOff >= 0) != want {
			t.Errorf("header %d: checksum field %d, want one: %v", tc.first, h.CsumOff, want)
		}
	}
}
