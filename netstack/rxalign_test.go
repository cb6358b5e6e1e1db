package netstack

import (
	"bytes"
	"testing"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestAlignedViewPlacesFramesAtIPAlign checks that a received frame is
// copied whole into a view whose first byte lies rxAlign bytes past a word
// boundary (so its IP header, 14 bytes on, is word aligned, as the ENET's
// SHIFT16 buffers are), for every frame length the MAC hands up.
func TestAlignedViewPlacesFramesAtIPAlign(t *testing.T) {
	src := make([]byte, 2+1522)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	for _, n := range []int{14, 60, 64, 66, 127, 128, 1514, 1518, 1522} {
		b := src[2 : 2+n]
		v := alignedView(b)
		got := v.AsSlice()
		if !bytes.Equal(got, b) {
			t.Fatalf("%d-byte frame: view holds %d different bytes", n, len(got))
		}
		if a := (uintptr(unsafe.Pointer(&got[0])) + 14) & 3; a != 0 {
			t.Errorf("%d-byte frame: its IP header starts %d bytes past a word", n, a)
		}
		v.Release()
	}
}

// scribbledFrame is a Frame whose Release overwrites its bytes, as a
// device that reuses the buffer at once would.
type scribbledFrame struct{ b []byte }

func (f *scribbledFrame) Bytes() []byte             { return f.b }
func (f *scribbledFrame) Verified() (ipv4, l4 bool) { return false, false }
func (f *scribbledFrame) Release() error            { clear(f.b); return nil }

// pktTypeRecorder is a NetworkDispatcher that keeps what it is handed.
type pktTypeRecorder struct {
	types []tcpip.PacketType
	heads [][]byte
}

func (r *pktTypeRecorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, p *stack.PacketBuffer) {
	r.types = append(r.types, p.PktType)
	r.heads = append(r.heads, p.Data().AsRange().ToSlice())
}

func (r *pktTypeRecorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestDeliverReadsNothingAfterRelease checks that deliver classifies and
// hands up a frame from its copy, not from the device buffer it released.
func TestDeliverReadsNothingAfterRelease(t *testing.T) {
	mac := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
	f := make([]byte, 60)
	copy(f, mac)
	copy(f[6:], "\x02\x00\x00\x00\x00\x02")
	f[12], f[13] = 0x08, 0x00
	for i := 14; i < len(f); i++ {
		f[i] = byte(i)
	}
	want := append([]byte(nil), f[14:]...)
	var e Endpoint
	var r pktTypeRecorder
	e.deliver(&r, &scribbledFrame{b: f}, mac)
	if len(r.types) != 1 {
		t.Fatalf("%d packets handed up, want 1", len(r.types))
	}
	if r.types[0] != tcpip.PacketHost {
		t.Errorf("frame to our address classified as packet type %d, want PacketHost", r.types[0])
	}
	if !bytes.Equal(r.heads[0], want) {
		t.Errorf("handed up % x, want % x", r.heads[0], want)
	}
}

// FuzzDeliverCopiesWhatArrived hands deliver arbitrary frames from a device
// that scribbles over each buffer it gets back: every frame is either
// counted (runt, unknown EtherType) or handed up with exactly the bytes
// that arrived after its Ethernet header.
func FuzzDeliverCopiesWhatArrived(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00payload"))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x02\x08\x06arp"))
	f.Add([]byte("short"))
	f.Add(make([]byte, 1514))
	f.Fuzz(func(t *testing.T, frame []byte) {
		mac := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
		want := append([]byte(nil), frame...)
		var e Endpoint
		var r pktTypeRecorder
		e.deliver(&r, &scribbledFrame{b: frame}, mac)
		st := e.stats.Stats
		switch {
		case len(want) < 14:
			if len(r.types) != 0 || st.RxRunts != 1 {
				t.Fatalf("%d-byte runt: %d handed up, %d counted", len(want), len(r.types), st.RxRunts)
			}
		case string(want[12:14]) != "\x08\x00" && string(want[12:14]) != "\x86\xdd" && string(want[12:14]) != "\x08\x06":
			if len(r.types) != 0 || st.RxUnknownType != 1 {
				t.Fatalf("EtherType % x: %d handed up, %d counted", want[12:14], len(r.types), st.RxUnknownType)
			}
		default:
			if len(r.types) != 1 || !bytes.Equal(r.heads[0], want[14:]) {
				t.Fatalf("%d-byte frame: handed up %d packets, first % x", len(want), len(r.types), r.heads)
			}
		}
	})
}
