package netstack

import (
	"encoding/binary"
	"errors"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/tso"
)

var errCsumDevFull = errors.New("csumDevice: full")

// csumDevice inserts checksums (TxCsum), records Transmit calls, refuses
// the calls whose numbers are in fail, and completes what it queued when
// told.
type csumDevice struct {
	calls  int
	fail   map[int]bool
	sent   [][]byte
	queued []any
	done   func(any, error)
}

func (d *csumDevice) Info() DeviceInfo {
	return DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxFrame: 1518, TxCsum: true, RxCsum: true}
}
func (d *csumDevice) SetTxDone(f func(any, error)) { d.done = f }
func (d *csumDevice) Transmit(frags [][]byte, csum bool, cookie any) error {
	n := d.calls
	d.calls++
	if d.fail[n] {
		return errCsumDevFull
	}
	var f []byte
	for _, v := range frags {
		f = append(f, v...)
	}
	d.sent = append(d.sent, f)
	d.queued = append(d.queued, cookie)
	return nil
}
func (d *csumDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error {
	return errors.New("unused")
}
func (d *csumDevice) Full(err error) bool      { return errors.Is(err, errCsumDevFull) }
func (d *csumDevice) Receive() (Frame, error)  { return nil, nil }
func (d *csumDevice) RxReady() <-chan struct{} { return nil }
func (d *csumDevice) Poll()                    {}
func (d *csumDevice) Close() error             { return nil }
func (d *csumDevice) completeAll() {
	q := d.queued
	d.queued = nil
	for _, c := range q {
		d.done(c, nil)
	}
}

// udpFragment returns an Ethernet frame holding the IPv4 fragment at byte
// offset off of UDP datagram id (whose first 8 bytes are its header, with
// checksum 0 as gVisor leaves it under TX offload): n payload bytes,
// more fragments to follow when more.
func udpFragment(id uint16, off, n int, more bool, datagram []byte) []byte {
	f := make([]byte, 14+20+n)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
	binary.BigEndian.PutUint16(ip[4:], id)
	fo := uint16(off / 8)
	if more {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(ip[6:], fo)
	ip[8], ip[9] = 64, 17
	copy(ip[12:16], []byte{10, 0, 0, 1})
	copy(ip[16:20], []byte{10, 0, 0, 2})
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
	copy(ip[20:], datagram[off:off+n])
	return f
}

// udpDatagram returns a UDP datagram of n payload bytes, checksum 0.
func udpDatagram(n int) []byte {
	d := make([]byte, 8+n)
	binary.BigEndian.PutUint16(d[0:], 1000)
	binary.BigEndian.PutUint16(d[2:], 7)
	binary.BigEndian.PutUint16(d[4:], uint16(8+n))
	for i := 8; i < len(d); i++ {
		d[i] = byte(i * 13)
	}
	return d
}

func writeFrame(t *testing.T, e *Endpoint, f []byte) error {
	t.Helper()
	p := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
	defer p.DecRef()
	var l stack.PacketBufferList
	l.PushBack(p)
	if _, err := e.WritePackets(l); err != nil {
		return errors.New(err.String())
	}
	return nil
}

// validUDP reports whether the IPv4 fragments sent (in order, starting
// at offset 0) carry a datagram whose UDP checksum is present and valid.
func validUDP(frames [][]byte) bool {
	var whole []byte
	for _, f := range frames {
		whole = append(whole, f[34:]...)
	}
	s := uint32(0x0a00+0x0001+0x0a00+0x0002) + 17 + uint32(len(whole))
	for i := 0; i+1 < len(whole); i += 2 {
		s += uint32(binary.BigEndian.Uint16(whole[i:]))
	}
	if len(whole)%2 == 1 {
		s += uint32(whole[len(whole)-1]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return binary.BigEndian.Uint16(whole[6:]) != 0 && s == 0xFFFF
}

// TestHeldFragmentsEveryOutcome drives the fragment holding of txcsum.go
// directly: a datagram in three fragments goes out whole with its checksum
// completed; a fifth datagram in progress evicts the oldest; a fragment
// out of order drops its datagram; a refused fragment drops the rest of
// its datagram; Close drops what is held. Every dropped fragment is
// counted (TxFragDrops) and its reference released (TxHeld back to what is
// in flight), and nothing is sent that should not be.
func TestHeldFragmentsEveryOutcome(t *testing.T) {
	dev := &csumDevice{fail: map[int]bool{}}
	e, err := New(Options{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	if e.Capabilities()&stack.CapabilityTXChecksumOffload == 0 {
		t.Fatal("TX checksum offload not advertised")
	}
	d := udpDatagram(3000)
	// Whole: 1480 + 1480 + 48 bytes.
	for _, fr := range []struct {
		off, n int
		more   bool
	}{{0, 1480, true}, {1480, 1480, true}, {2960, 48, false}} {
		if err := writeFrame(t, e, udpFragment(1, fr.off, fr.n, fr.more, d)); err != nil {
			t.Fatal(err)
		}
		if fr.more && len(dev.sent) != 0 {
			t.Fatal("a fragment went out before its datagram was complete")
		}
	}
	if len(dev.sent) != 3 || !validUDP(dev.sent) {
		t.Fatalf("%d fragments sent; checksum valid: %v", len(dev.sent), len(dev.sent) == 3 && validUDP(dev.sent))
	}
	dev.completeAll()
	if h := e.Stats().TxHeld; h != 0 {
		t.Fatalf("after completion %d packets held", h)
	}
	// Five datagrams started: the first is evicted.
	for id := uint16(10); id < 15; id++ {
		if err := writeFrame(t, e, udpFragment(id, 0, 1480, true, d)); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.Stats(); st.TxFragDrops != 1 || st.TxHeld != 4 || len(dev.sent) != 3 {
		t.Fatalf("eviction: %d dropped, %d held, %d sent", st.TxFragDrops, st.TxHeld, len(dev.sent))
	}
	// Out of order: datagram 11 gets its third fragment next.
	if err := writeFrame(t, e, udpFragment(11, 2960, 48, false, d)); err == nil {
		t.Fatal("a fragment out of order was accepted")
	}
	if st := e.Stats(); st.TxFragDrops != 2 || st.TxHeld != 3 {
		t.Fatalf("out of order: %d dropped, %d held", st.TxFragDrops, st.TxHeld)
	}
	// A later fragment of a datagram never started.
	if err := writeFrame(t, e, udpFragment(99, 1480, 1480, true, d)); err == nil {
		t.Fatal("a fragment of an unknown datagram was accepted")
	}
	// Refused: datagram 12's second fragment is refused when queued.
	if err := writeFrame(t, e, udpFragment(12, 1480, 1480, true, d)); err != nil {
		t.Fatal(err)
	}
	dev.fail[dev.calls+1] = true
	if err := writeFrame(t, e, udpFragment(12, 2960, 48, false, d)); err == nil {
		t.Fatal("the last fragment reported success though its datagram was cut short")
	}
	if st := e.Stats(); st.TxFragDrops != 4 || st.TxHeld != 3 || len(dev.sent) != 4 {
		// Dropped: the refused fragment and the last one; in flight: the
		// first; still held: datagrams 13 and 14.
		t.Fatalf("refused: %d dropped, %d held, %d sent", st.TxFragDrops, st.TxHeld, len(dev.sent))
	}
	dev.completeAll()
	e.Close()
	if st := e.Stats(); st.TxFragDrops != 6 || st.TxHeld != 0 {
		t.Fatalf("after Close: %d dropped, %d held", st.TxFragDrops, st.TxHeld)
	}
}
