package netstack

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/tso"
)

var errFull = errors.New("splitDevice: ring full")

// splitDevice records TransmitGSO calls. It refuses every call whose
// number is in full (ring full), and completes what it queued when told.
type splitDevice struct {
	mu     sync.Mutex
	calls  int
	full   map[int]bool
	queued []splitCall // not completed yet
	log    []splitCall // every call accepted
	done   func(any, error)
	bg     sync.WaitGroup // completions run in the background after a refusal
}

type splitCall struct {
	hdr     []byte
	payload []byte
	views   int
	cookie  any
}

func (d *splitDevice) Info() DeviceInfo {
	return DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxFrame: 1518, Segmentation: true, MaxGSOSegments: 10, MaxGSOViews: 2}
}
func (d *splitDevice) SetTxDone(f func(any, error))       { d.done = f }
func (d *splitDevice) Transmit([][]byte, bool, any) error { return errors.New("unused") }
func (d *splitDevice) Full(err error) bool                { return errors.Is(err, errFull) }
func (d *splitDevice) Receive() (Frame, error)            { return nil, nil }
func (d *splitDevice) RxReady() <-chan struct{}           { return nil }
func (d *splitDevice) Poll()                              {}
func (d *splitDevice) Close() error                       { return nil }
func (d *splitDevice) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	d.mu.Lock()
	n := d.calls
	d.calls++
	refuse := d.full[n]
	var freed []splitCall
	if refuse {
		// Free the ring as completions would: what is queued now
		// completes in the background (not what is queued after the
		// endpoint's retry).
		freed, d.queued = d.queued, nil
	}
	d.mu.Unlock()
	if refuse {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			for _, c := range freed {
				d.done(c.cookie, nil)
			}
		}()
		return errFull
	}
	c := splitCall{hdr: append([]byte(nil), hdr...), views: len(payload), cookie: cookie}
	for _, v := range payload {
		c.payload = append(c.payload, v...)
	}
	d.mu.Lock()
	d.queued = append(d.queued, c)
	d.log = append(d.log, c)
	d.mu.Unlock()
	return nil
}

func (d *splitDevice) completeAll() {
	d.mu.Lock()
	q := d.queued
	d.queued = nil
	d.mu.Unlock()
	for _, c := range q {
		d.done(c.cookie, nil)
	}
}

// A TCP/IPv4 packet of 25 segments at MSS 100 in 6 views, on a device that
// takes at most 10 segments and 2 views per GSO packet and whose ring is
// full when the second piece is first offered: three pieces, each with the
// right sequence number, IPv4 ID and flags, views gathered, the refused
// piece sent once descriptors are free, and the packet released once,
// after the last piece completes.
func TestWriteGSOSplitsWhatTheDeviceCannotTake(t *testing.T) {
	dev := &splitDevice{full: map[int]bool{1: true}}
	e, err := New(Options{Device: dev, TSO: true})
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 14+20+20)
	hdr[12], hdr[13] = 0x08, 0x00
	ip := hdr[14:]
	ip[0], ip[9] = 0x45, 6
	binary.BigEndian.PutUint16(ip[4:], 1000) // IPv4 ID
	tcp := hdr[34:]
	binary.BigEndian.PutUint32(tcp[4:], 0xFFFFFF00) // sequence, wrapping
	tcp[12], tcp[13] = 5<<4, 0x80|0x10|0x08|0x01    // CWR ACK PSH FIN
	data := make([]byte, 2450)
	for i := range data {
		data[i] = byte(i * 13)
	}
	var views [][]byte
	for _, cut := range []int{0, 300, 700, 1000, 1500, 2000, 2450} {
		if cut > 0 {
			views = append(views, data[len(flatten(views)):cut])
		}
	}
	p := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(data)})
	p.IncRef() // the endpoint's reference, as writePacket takes it
	e.held.Add(1)
	if err := e.writeGSO(p, hdr, 14, 34, views, tso.Options{Type: tso.TCP, MSS: 100}); err != nil {
		t.Fatal(err)
	}
	// The completions the refusal started may still be running (the
	// endpoint can retry as soon as one has freed space): let them end.
	dev.bg.Wait()
	dev.mu.Lock()
	calls, log, pending := dev.calls, dev.log, len(dev.queued)
	dev.mu.Unlock()
	if calls != 4 || len(log) != 3 {
		t.Fatalf("%d TransmitGSO calls, %d accepted: want 3 pieces and one retry", calls, len(log))
	}
	var got []byte
	off, segs := 0, 0
	for k, c := range log {
		if c.views > 2 {
			t.Errorf("piece %d: %d views, the device takes 2", k, c.views)
		}
		if want := min(1000, len(data)-off); len(c.payload) != want {
			t.Fatalf("piece %d: %d bytes, want %d", k, len(c.payload), want)
		}
		seq := binary.BigEndian.Uint32(c.hdr[34+4:])
		id := binary.BigEndian.Uint16(c.hdr[14+4:])
		flags := c.hdr[34+13]
		wantFlags := byte(0x10)
		if k == 0 {
			wantFlags |= 0x80
		}
		if k == len(log)-1 {
			wantFlags |= 0x08 | 0x01
		}
		if seq != 0xFFFFFF00+uint32(off) || id != uint16(1000+segs) || flags != wantFlags {
			t.Errorf("piece %d: seq %#x id %d flags %#x, want %#x %d %#x", k, seq, id, flags, 0xFFFFFF00+uint32(off), 1000+segs, wantFlags)
		}
		got = append(got, c.payload...)
		off += len(c.payload)
		segs += (len(c.payload) + 99) / 100
	}
	if string(got) != string(data) {
		t.Fatal("the pieces do not carry the packet's payload in order")
	}
	if binary.BigEndian.Uint32(tcp[4:]) != 0xFFFFFF00 || tcp[13] != 0x99 {
		t.Fatal("the packet's own header was modified")
	}
	if pending == 0 || p.ReadRefs() != 2 || e.held.Load() != 1 {
		t.Fatalf("%d pieces pending, refs %d, held %d: the packet must stay held until the last completes", pending, p.ReadRefs(), e.held.Load())
	}
	dev.completeAll()
	if p.ReadRefs() != 1 || e.held.Load() != 0 {
		t.Fatalf("refs %d, held %d after every completion: want 1 (the caller's) and 0", p.ReadRefs(), e.held.Load())
	}
	if st := e.Stats(); st.TxSplitPieces != 3 || st.TxGathered != 1 || st.TxCutShort != 0 {
		t.Fatalf("stats %+v", st)
	}
	p.DecRef()

	// The first piece refused: nothing is queued, the error comes back and
	// the caller still owns its reference.
	dev.full = map[int]bool{4: true}
	p = stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(data)})
	if err := e.writeGSO(p, hdr, 14, 34, views, tso.Options{Type: tso.TCP, MSS: 100}); !dev.Full(err) {
		t.Fatalf("first piece refused: %v", err)
	}
	if p.ReadRefs() != 1 {
		t.Fatalf("refs %d after a refusal", p.ReadRefs())
	}
	p.DecRef()
}

func flatten(v [][]byte) []byte {
	var b []byte
	for _, x := range v {
		b = append(b, x...)
	}
	return b
}
