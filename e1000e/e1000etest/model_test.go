package e1000etest_test

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/e1000e/e1000etest"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// bench is the model behind an i.MX7D root complex, driven by raw register
// and descriptor writes (no driver), to show each violation is reported.
type bench struct {
	t    *testing.T
	h    *pcietest.Host
	m    *e1000etest.Model
	mem  *dmatest.Memory
	r    mmio.Regs
	d    *pcie.Device
	ring dma.Buffer
	buf  dma.Buffer
}

func newBench(t *testing.T, o e1000etest.Options) *bench {
	mem := dmatest.New(t, dmatest.Options{CachedSize: 1 << 20, CoherentSize: 64 << 10})
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D, Mem: mem})
	o.Mem = mem
	o.Nanotime = h.Nanotime
	m := e1000etest.New(o)
	h.Attach(0, m.Function())
	rc, devs, err := h.Up()
	if err != nil || len(devs) != 1 {
		t.Fatal(devs, err)
	}
	w, err := rc.Map(devs[0], 0, 0, 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	ring, _ := mem.Alloc(8*16, 128, dma.Coherent)
	buf, _ := mem.Alloc(4096, 64, dma.Cached)
	return &bench{t: t, h: h, m: m, mem: mem, r: w, d: devs[0], ring: ring, buf: buf}
}

func (b *bench) desc(i int, w0, w1, w2, w3 uint32) {
	d := b.ring.Bytes()[16*i:]
	binary.LittleEndian.PutUint32(d[0:], w0)
	binary.LittleEndian.PutUint32(d[4:], w1)
	binary.LittleEndian.PutUint32(d[8:], w2)
	binary.LittleEndian.PutUint32(d[12:], w3)
}

// initBits writes the 82574 bits of Linux e1000_initialize_hw_bits_82571.
func (b *bench) initBits() {
	b.r.Write32(0x3828, 1<<22)
	b.r.Write32(0x3928, 1<<22)
	b.r.Write32(0x3840, 1<<26)
	b.r.Write32(0x0018, 1<<22)
	b.r.Write32(0x5B00, 1<<22)
	b.r.Write32(0x5B64, 1)
}

func (b *bench) startTX() {
	b.initBits()
	b.r.Write32(0x3800, uint32(b.ring.Addr()))
	b.r.Write32(0x3804, 0)
	b.r.Write32(0x3808, 8*16)
	b.r.Write32(0x0400, 2|8)
}

func (b *bench) startRX() {
	b.r.Write32(0x5008, 1<<15)
	b.r.Write32(0x2800, uint32(b.ring.Addr()))
	b.r.Write32(0x2808, 8*16)
	b.r.Write32(0x0100, 2|1<<15)
}

// expect checks that exactly the violations named were reported.
func (b *bench) expect(want ...string) {
	b.t.Helper()
	got := b.m.Take()
	if len(got) != len(want) {
		b.t.Fatalf("violations %q, want %q", got, want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			b.t.Errorf("violation %q, want %q", got[i], want[i])
		}
	}
}

const (
	dext  = 1 << 29
	dtypD = 1 << 20
	eop   = 1 << 24
	rs    = 1 << 27
	tse   = 1 << 26
	ifcs  = 1 << 25
)

func TestTXViolations(t *testing.T) {
	b := newBench(t, e1000etest.Options{})
	if err := b.d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.ToDevice)
	b.startTX()
	a := uint32(b.buf.Addr())
	b.desc(0, a, 0, 60|eop|rs, 0) // legacy
	b.r.Write32(0x3818, 1)
	b.expect("legacy TX descriptor")
	b.desc(1, a, 0, dext|dtypD|ifcs|0|eop, 0) // zero length
	b.r.Write32(0x3818, 2)
	b.expect("length 0")
	b.desc(2, a, 0, dext|dtypD|ifcs|tse|100|eop, 0) // TSO data without context
	b.r.Write32(0x3818, 3)
	b.expect("without a TSO context")
	b.desc(3, 14|24<<8|33<<16, 34|50<<8, dext|tse|1<<25|1<<24|500, 54<<8|1000<<16) // TSO context, PAYLEN 500
	b.desc(4, a, 0, dext|dtypD|ifcs|tse|200|eop|rs, 3<<8)                          // gathers 146 payload bytes
	b.r.Write32(0x3818, 5)
	b.expect("PAYLEN 500")
	b.desc(5, a, 0, dext|dtypD|ifcs|100|eop, 1<<8) // IXSM without a checksum context (the last was TSO)
	b.r.Write32(0x3818, 6)
	b.expect("without a checksum context")
	if tail := b.r.Read32(0x3810); tail != 6 {
		t.Fatalf("TDH %d", tail)
	}
	b.r.Write32(0x3818, 9)
	b.expect("TDT 9 outside")
	// Bus mastering off: the descriptor fetch is refused.
	b.d.SetBusMaster(false)
	b.desc(6, a, 0, dext|dtypD|ifcs|64|eop, 0)
	b.r.Write32(0x3818, 7)
	b.expect("bus mastering disabled")
}

func TestTXOwnership(t *testing.T) {
	b := newBench(t, e1000etest.Options{ManualTX: true})
	b.d.SetBusMaster(true)
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.ToDevice)
	b.startTX()
	a := uint32(b.buf.Addr())
	for i := 0; i < 3; i++ {
		b.desc(i, a, 0, dext|dtypD|ifcs|64|eop|rs, 0)
	}
	b.r.Write32(0x3818, 3)
	b.desc(1, a, 0, dext|dtypD|ifcs|65|eop|rs, 0) // rewritten while owned
	b.desc(3, a, 0, dext|dtypD|ifcs|64|eop|rs, 0)
	b.r.Write32(0x3818, 4)
	b.expect()
	b.m.ProcessTX()
	b.expect("rewritten by the driver")
	if st := b.m.Stats(); st.TxFrames != 4 {
		t.Errorf("%+v", st)
	}
	b.desc(4, a, 0, dext|dtypD|ifcs|64|eop|rs, 0)
	b.desc(5, a, 0, dext|dtypD|ifcs|64|eop|rs, 0)
	b.r.Write32(0x3818, 6)
	b.r.Write32(0x3818, 5) // the device owns 4 and 5: the tail may not pass them
	b.expect("past TDH")
}

func TestRXViolations(t *testing.T) {
	b := newBench(t, e1000etest.Options{MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	b.d.SetBusMaster(true)
	for i := 0; i < 8; i++ {
		b.desc(i, uint32(b.buf.Addr())+uint32(i)*512, 0, 0, 0)
	}
	b.desc(1, uint32(b.buf.Addr())+512, 0, 1, 0) // DD left set
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.FromDevice)
	b.r.Write32(0x0100, 0)
	b.startRX()
	b.r.Write32(0x2818, 4)
	f := make([]byte, 64)
	copy(f, []byte{2, 0, 0, 0, 0, 1})
	for i := 0; i < 2; i++ {
		if !b.m.Inject(f) {
			t.Fatal("not stored")
		}
	}
	b.expect("DD still set")
	b.r.Write32(0x2818, 3) // RDH is 2: tail may not reach it from behind
	b.expect("past RDH")
	b.r.Write32(0x2818, 1) // giving back 0 (DD is the driver's) is fine
	b.expect()
	// The RX ring not a multiple of 128 bytes, legacy descriptors.
	b.r.Write32(0x2808, 100)
	b.r.Write32(0x5008, 0)
	b.r.Write32(0x0100, 2)
	b.expect("not a non-zero multiple of 128", "legacy RX descriptors")
}

// A data descriptor without DCMD.IFCS makes the MAC send no FCS: the
// partner drops the frame. The model reports it and sends nothing.
func TestTXWithoutIFCS(t *testing.T) {
	b := newBench(t, e1000etest.Options{})
	b.d.SetBusMaster(true)
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.ToDevice)
	b.startTX()
	var sent int
	b.m.OnTransmit(func([]byte) { sent++ })
	a := uint32(b.buf.Addr())
	b.desc(0, a, 0, dext|dtypD|64|eop|rs, 0)
	b.r.Write32(0x3818, 1)
	b.expect("without DCMD.IFCS")
	b.desc(1, a, 0, dext|dtypD|ifcs|64|eop|rs, 0)
	b.r.Write32(0x3818, 2)
	b.expect()
	if sent != 1 {
		t.Fatalf("%d frames on the wire, want 1 (only the one with IFCS)", sent)
	}
}

// rxOne hands descriptor 0 (buffer at b.buf) to the device with rctl and
// injects f; it returns the write-back length and the buffer.
func (b *bench) rxOne(rctl uint32, f []byte) (bool, int, []byte) {
	b.d.SetBusMaster(true)
	b.desc(0, uint32(b.buf.Addr()), 0, 0, 0)
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.FromDevice)
	b.r.Write32(0x5008, 1<<15)
	b.r.Write32(0x2800, uint32(b.ring.Addr()))
	b.r.Write32(0x2808, 8*16)
	b.r.Write32(0x0100, rctl)
	b.r.Write32(0x2818, 1)
	ok := b.m.Inject(f)
	b.mem.SyncForCPU(&b.buf, 0, b.buf.Len(), dma.FromDevice)
	ln := int(binary.LittleEndian.Uint16(b.ring.Bytes()[12:]))
	return ok, ln, b.buf.Bytes()
}

// Without RCTL.SECRC the silicon leaves the FCS in the buffer and counts
// it in the length; with it, the frame alone.
func TestRXFCSFollowsSECRC(t *testing.T) {
	f := make([]byte, 64)
	copy(f, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xB5})
	for i := 14; i < len(f); i++ {
		f[i] = byte(i)
	}
	b := newBench(t, e1000etest.Options{MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	ok, ln, buf := b.rxOne(2, f)
	if !ok || ln != 68 {
		t.Fatalf("SECRC clear: stored %v, length %d, want 68 (frame and FCS)", ok, ln)
	}
	if got, want := binary.LittleEndian.Uint32(buf[64:]), crc32.ChecksumIEEE(f); got != want {
		t.Errorf("FCS %#x, want %#x", got, want)
	}
	b = newBench(t, e1000etest.Options{MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	if ok, ln, _ := b.rxOne(2|1<<26, f); !ok || ln != 64 {
		t.Fatalf("SECRC set: stored %v, length %d, want 64", ok, ln)
	}
	b.expect()
}

// The buffer size is RCTL.BSIZE's, not a fixed 2048 bytes: a frame larger
// than a 256-byte buffer is not written past it.
func TestRXBufferSizeFromRCTL(t *testing.T) {
	b := newBench(t, e1000etest.Options{MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	f := make([]byte, 300)
	for i := range f {
		f[i] = 0xAA
	}
	copy(f, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xB5})
	if ok, _, buf := b.rxOne(2|1<<26|3<<16, f); ok || buf[256] != 0 {
		t.Fatalf("300-byte frame into a 256-byte buffer: stored %v, byte 256 %#x", ok, buf[256])
	}
	b.expect("256-byte buffer")
}

// The reset rules of e1000_reset_hw_82571 (see Options): CTRL.RST only
// with GIO master requests disabled, nothing but CTRL/STATUS/EECD until
// EECD.AUTO_RD, no PHY or NVM access for 25 ms after it.
func TestModelResetRules(t *testing.T) {
	b := newBench(t, e1000etest.Options{AutoReadDelay: 3 * time.Millisecond})
	if s := b.r.Read32(0x8); s&(1<<19) == 0 {
		t.Fatalf("STATUS %#x: GIO master enable clear before any disable", s)
	}
	b.r.Write32(0, 1<<26)
	b.expect("GIO master requests enabled")
	if e := b.r.Read32(0x10); e&(1<<9) != 0 {
		t.Errorf("EECD %#x: AUTO_RD set right after the reset", e)
	}
	b.r.Read32(0xC0)
	b.expect("before EECD.AUTO_RD")
	b.h.Delay(3 * time.Millisecond)
	if e := b.r.Read32(0x10); e&(1<<9) == 0 {
		t.Errorf("EECD %#x: AUTO_RD clear after the auto-read", e)
	}
	b.r.Write32(0x20, 1<<21|1<<16|2<<26)
	b.expect("within 25 ms")
	b.h.Delay(25 * time.Millisecond)
	b.r.Write32(0x20, 1<<21|1<<16|2<<26)
	b.expect()
	// Done as Linux does it: no violation, and the reset re-enables
	// GIO mastering.
	b.r.Write32(0, 1<<2)
	if s := b.r.Read32(0x8); s&(1<<19) != 0 {
		t.Errorf("STATUS %#x: GIO master enable still set after the disable", s)
	}
	b.r.Write32(0, 1<<26|1<<2)
	b.expect()
	b.h.Delay(30 * time.Millisecond)
	if s := b.r.Read32(0x8); s&(1<<19) == 0 {
		t.Errorf("STATUS %#x: GIO mastering not back after the reset", s)
	}
	b.expect()
}

// A transmitter enabled without Linux's 82574 init bits is reported, one
// violation per register.
func TestModelInitBits(t *testing.T) {
	b := newBench(t, e1000etest.Options{})
	b.r.Write32(0x3800, uint32(b.ring.Addr()))
	b.r.Write32(0x3808, 8*16)
	b.r.Write32(0x0000, 1<<29)
	b.r.Write32(0x0400, 2|8)
	b.expect("TXDCTL(0)", "TXDCTL(1)", "TARC(0)", "CTRL =", "CTRL_EXT", "GCR =", "GCR2")
	b.r.Write32(0x0000, 0)
	b.startTX()
	b.expect()
}

// A hung PHY reads its receive error counter and idle error count
// saturated and passes no frames until a PHY reset.
func TestModelPHYHang(t *testing.T) {
	b := newBench(t, e1000etest.Options{})
	b.h.Delay(time.Second)
	mdic := func(reg, op, v uint32) uint32 {
		b.r.Write32(0x20, v|reg<<16|1<<21|op<<26)
		return b.r.Read32(0x20) & 0xFFFF
	}
	b.m.HangPHY()
	if rx, st := mdic(21, 2, 0), mdic(10, 2, 0); rx != 0xFFFF || st&0xFF != 0xFF {
		t.Fatalf("hung PHY: receive errors %#x, 1000BASE-T status %#x", rx, st)
	}
	b.startRX()
	if b.m.Inject(make([]byte, 64)) || b.m.Stats().RxPHYHung != 1 {
		t.Errorf("a hung PHY passed a frame: %+v", b.m.Stats())
	}
	mdic(0, 1, 1<<15|0x1140)
	if b.m.PHYHung() || mdic(21, 2, 0) != 0 || mdic(0, 2, 0)&(1<<15) != 0 {
		t.Error("BMCR.Reset did not end the hang or did not self-clear")
	}
	b.expect()
}

// TestModelMACLoopbackNeedsForcedLink: a frame sent in MAC loopback
// (RCTL.LBM 01b) without CTRL.SLU and CTRL.FD is a violation and is lost;
// with them it reaches the MAC's own receiver, not the wire.
func TestModelMACLoopbackNeedsForcedLink(t *testing.T) {
	b := newBench(t, e1000etest.Options{})
	var wire int
	b.m.OnTransmit(func([]byte) { wire++ })
	if err := b.d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b.mem.SyncForDevice(&b.buf, 0, b.buf.Len(), dma.ToDevice)
	b.startTX()
	b.r.Write32(0x0000, 0)                       // CTRL: no SLU, no FD
	b.r.Write32(0x0100, b.r.Read32(0x0100)|1<<6) // RCTL.LBM = 01b
	a := uint32(b.buf.Addr())
	b.desc(0, a, 0, dext|dtypD|ifcs|60|eop, 0)
	b.r.Write32(0x3818, 1)
	b.expect("MAC loopback")
	b.r.Write32(0x0000, 1<<6|1) // SLU, FD
	b.desc(1, a, 0, dext|dtypD|ifcs|60|eop, 0)
	b.r.Write32(0x3818, 2)
	b.expect()
	if st := b.m.Stats(); st.Looped != 1 || wire != 0 {
		t.Errorf("stats %+v, %d frames on the wire: want one looped, none out", st, wire)
	}
}
