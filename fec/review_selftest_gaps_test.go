package fec_test

import (
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// finEverySegment is a dma.Memory that, as each TSO segment's header
// (TCP/IPv4, ports 5201, the self-test's) is cleaned for the device, sets
// FIN in it: a segmenter (or a stale header slot) that gets the flags
// wrong. The MAC inserts the TCP checksum afterwards (PINS), so every
// segment still carries valid checksums.
type finEverySegment struct {
	*dmatest.Memory
	changed int
}

func (m *finEverySegment) SyncForDevice(b *dma.Buffer, off, n int, dir dma.Dir) {
	if p := b.Bytes()[off : off+n]; dir == dma.ToDevice && len(p) >= 54 &&
		binary.BigEndian.Uint16(p[12:]) == 0x0800 && p[23] == 6 &&
		binary.BigEndian.Uint16(p[34:]) == 5201 && binary.BigEndian.Uint16(p[36:]) == 5201 {
		p[47] |= 0x01 // FIN
		m.changed++
	}
	m.Memory.SyncForDevice(b, off, n, dir)
}

// TestReviewSelfTestTSOHeadersUnchecked: the tso mode checks only each
// segment's sequence number, its payload length and checksums, and the
// payload as a whole (selfTestGSO's check). Nothing else in a segment's
// headers is compared with what the segmenter must write (Linux's
// tso_build_hdr: PSH and FIN only on the last segment, IP ID counting up,
// the rest of the header as given), and bytes past the IP total length
// are ignored. Here every segment goes out with FIN set, so a receiver
// would take the first 1,448 bytes as the end of the stream (RFC 9293
// 3.10.7.4), yet the mode reports "ok". A defect (class 5: "ok" given
// for a header never compared; the bounce and sg modes compare every
// byte).
func TestReviewSelfTestTSOHeadersUnchecked(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{})
	fm := &finEverySegment{Memory: mem}
	r := fectest.NewRig(t, fectest.RigOptions{Mem: mem, Config: func(c *fec.Config) { c.Mem = fm }})
	res := selfTest(t, r)
	if fm.changed == 0 {
		t.Fatal("no TSO header seen: the fault was not injected")
	}
	if tso := res[2]; tso.OK() {
		t.Errorf("%s: passed though %d segments went out with FIN set", tso, fm.changed)
	}
}

// neverFlags is the ENET's registers with an RX checksum checker that
// flags nothing: after each TDAR kick (the loopback writes the RX
// descriptors then) and on scrub, ICE and PCR are cleared in every RX
// descriptor the MAC has filled.
type neverFlags struct {
	mmio.Regs
	mem *dmatest.Memory
	n   int
}

func (r *neverFlags) Write32(off, v uint32) {
	r.Regs.Write32(off, v)
	if off == fec.ENETx_TDAR {
		r.scrub()
	}
}

func (r *neverFlags) scrub() {
	base := dma.Addr(r.Regs.Read32(fec.ENETx_RDSR))
	var d [fec.EnhancedDescSize]byte
	for i := 0; i < r.n; i++ {
		a := base + dma.Addr(i*fec.EnhancedDescSize)
		if r.mem.DeviceRead(a, d[:]) != nil {
			return
		}
		if binary.LittleEndian.Uint32(d[0:])>>16&uint32(fec.RX_E) != 0 {
			continue
		}
		e0 := binary.LittleEndian.Uint32(d[8:])
		binary.LittleEndian.PutUint32(d[8:], e0&^(fec.RXE_ICE|fec.RXE_PCR))
		r.mem.DeviceWrite(a, d[:])
	}
}

// TestReviewSelfTestVerdictOneSided: the self-test sends only frames with
// good checksums (loopframe.UDP and the TSO segments), so checkVerdict can only
// find a good sum reported bad (Faults.WrongVerdict's case). An RX
// checksum checker that flags nothing, the dangerous direction (the stack
// skips its own check on a claimed verdict: checklist class 5), passes
// every mode, and the first frame from the wire with a bad UDP checksum
// is then claimed verified. The test's doc promises "a wrong RX checksum
// verdict against a software sum"; it checks half of it. A defect: the
// loopback could send a frame with a wrong UDP checksum (no insertion)
// and require that no verdict claims it.
func TestReviewSelfTestVerdictOneSided(t *testing.T) {
	var nf *neverFlags
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) {
		nf = &neverFlags{Regs: c.Regs, mem: nil, n: c.RxRing}
		c.Regs = nf
	}})
	nf.mem = r.Mem
	res := selfTest(t, r)
	passed := res[0].OK() && res[1].OK() && res[2].OK()
	// The fault is real: a UDP frame with a wrong checksum from the wire.
	f := make([]byte, 100)
	copy(f, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x08, 0x00, 0x45})
	f[22], f[23] = 64, 17
	binary.BigEndian.PutUint16(f[16:], 86)
	copy(f[26:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	binary.BigEndian.PutUint16(f[34:], 9)
	binary.BigEndian.PutUint16(f[36:], 9)
	binary.BigEndian.PutUint16(f[38:], 66)
	binary.BigEndian.PutUint16(f[40:], 0x1234) // wrong
	var s uint32
	for i := 14; i < 34; i += 2 {
		s += uint32(binary.BigEndian.Uint16(f[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(f[24:], ^uint16(s))
	if !r.Model.Deliver(f, fectest.RxOK) {
		t.Fatal("frame not taken")
	}
	nf.scrub()
	p, err := r.NIC.Receive()
	if err != nil || p == nil {
		t.Fatalf("receive: %v %v", p, err)
	}
	claimed := p.Csum.L4
	p.Release()
	if passed && claimed {
		t.Errorf("self-test passed (%s; %s; %s) with an RX checker that then claimed a bad UDP checksum verified", res[0], res[1], res[2])
	}
}
