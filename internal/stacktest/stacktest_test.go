package stacktest

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// pipePair builds two hosts joined by gVisor's in-memory pipe.
func pipePair(t *testing.T, o Options) (a, b *Host) {
	ea, eb := pipe.New("\x02\x00\x00\x00\x00\x01", "\x02\x00\x00\x00\x00\x02", 1500)
	a, b = New(t, ethernet.New(ea), 1, o), New(t, ethernet.New(eb), 2, o)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestTransferOverPipe(t *testing.T) {
	a, b := pipePair(t, Options{Net4: [3]byte{192, 168, 7}})
	if got := a.V4.String(); got != "192.168.7.1" {
		t.Errorf("V4 %s", got)
	}
	if got := b.V6.String(); got != "fd00::2" {
		t.Errorf("V6 %s", got)
	}
	for i, v6 := range []bool{false, true} {
		var rcvd atomic.Int64
		const n = 300 << 10
		if err := Transfer(t, a, b, v6, uint16(9000+i), n, Xfer{Received: &rcvd}); err != nil {
			t.Fatalf("v6=%v: %v", v6, err)
		}
		if rcvd.Load() != n {
			t.Errorf("v6=%v: Received %d, want %d", v6, rcvd.Load(), n)
		}
	}
}

func TestIPv4Only(t *testing.T) {
	a, b := pipePair(t, Options{IPv4Only: true, DefaultBuffers: true})
	if a.V6.Len() != 0 || a.V4.String() != "10.0.0.1" {
		t.Fatalf("addresses %v %v", a.V4, a.V6)
	}
	if err := Transfer(t, a, b, false, 80, 64<<10, Xfer{}); err != nil {
		t.Fatal(err)
	}
}

func TestStreamDeterministic(t *testing.T) {
	x, _ := io.ReadAll(io.LimitReader(Stream(5), 1000))
	y, _ := io.ReadAll(io.LimitReader(Stream(5), 1000))
	z, _ := io.ReadAll(io.LimitReader(Stream(6), 1000))
	if !bytes.Equal(x, y) || bytes.Equal(x, z) {
		t.Fatal("Stream is not a function of its seed")
	}
}

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()        {}
func (r *recorder) Error(a ...any) { r.errs = append(r.errs, fmt.Sprint(a...)) }
func (r *recorder) Errorf(f string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
}

func TestWire(t *testing.T) {
	arp := make([]byte, 60)
	copy(arp, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 2, 0, 0, 0, 0, 1, 8, 6, 0, 1, 8, 0, 6, 4, 0, 1})
	junk := bytes.Repeat([]byte{0xEE}, 1600)

	var empty Wire
	r := &recorder{TB: t}
	empty.Check(r, 1514, true)
	if len(r.errs) != 1 {
		t.Errorf("empty wire: %q", r.errs)
	}

	var w Wire
	w.Tap(arp)
	r = &recorder{TB: t}
	w.Check(r, 1514, true)
	if len(r.errs) != 0 || w.Frames() != 1 || w.MaxLen() != 60 {
		t.Errorf("one ARP frame: %q, %d frames, longest %d", r.errs, w.Frames(), w.MaxLen())
	}
	w.Tap(junk)
	r = &recorder{TB: t}
	w.Check(r, 1514, true)
	if len(r.errs) != 2 || w.MaxLen() != 1600 {
		t.Errorf("undecodable 1600-byte frame: %q, longest %d", r.errs, w.MaxLen())
	}
}

// TestShapedTransfer: a transfer with the receiver's MSS set, small
// writes and a receiver that starts late moves every byte, and NoSACK
// turns SACK off.
func TestShapedTransfer(t *testing.T) {
	a, b := pipePair(t, Options{NoSACK: true})
	var sack tcpip.TCPSACKEnabled
	if err := a.S.TransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil || sack {
		t.Fatalf("SACK %v (%v) with NoSACK", sack, err)
	}
	if err := Transfer(t, a, b, false, 7001, 300<<10, Xfer{MSS: 536, Write: 1000, Hold: 200 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := Transfer(t, a, b, true, 7002, 64<<10, Xfer{MSS: 1 << 20}); err == nil {
		t.Fatal("an MSS gVisor refuses was accepted")
	}
}
