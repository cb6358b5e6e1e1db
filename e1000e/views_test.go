package e1000e_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/e1000e/e1000etest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// worstViews cuts p into v views that take the most data descriptors
// (8 KiB each): views of 8193 bytes (two descriptors each) while the rest
// can still give every remaining view a byte, then one-byte views, the
// last view taking what is left.
func worstViews(p []byte, v int) [][]byte {
	var out [][]byte
	for len(out) < v-1 {
		k := 1
		if len(p)-e1000e.MaxPerDesc-1 >= v-1-len(out) {
			k = e1000e.MaxPerDesc + 1
		}
		out, p = append(out, p[:k]), p[k:]
	}
	return append(out, p)
}

func descs(views [][]byte) int {
	d := 0
	for _, v := range views {
		d += (len(v) + e1000e.MaxPerDesc - 1) / e1000e.MaxPerDesc
	}
	return d
}

// TestInfoGSOBudget: the segments and views Info states are what the
// driver takes. For each TX ring size, a GSO packet as large as the
// endpoint makes at the smallest MSS (segments x 536 bytes, at most the
// 64 KiB datagram) cut into MaxGSOViews views arranged to take the most
// descriptors is accepted on an empty ring, leaves the model (which
// enforces QEMU's 64 data descriptors per packet) without a violation,
// and arrives whole; MaxGSOViews is more than one view for rings that
// hold a 64 KiB packet.
func TestInfoGSOBudget(t *testing.T) {
	for _, ring := range []int{8, 16, 64, 256, 512} {
		r := newRig(t, rigOptions{cfg: func(c *e1000e.Config) { c.TxRing = ring }})
		c := capturing(r)
		info := e1000e.Device{NIC: r.nic}.Info()
		if ring >= 16 && info.MaxGSOViews < 2 {
			t.Errorf("ring %d: MaxGSOViews %d: multi-view GSO packets would be gathered by the endpoint", ring, info.MaxGSOViews)
		}
		if info.MaxGSOViews < 1 || info.MaxGSOSegments*536 < 161+536 {
			t.Fatalf("ring %d: info %+v", ring, info)
		}
		hdr, _ := tcpPacket(t, false, 0, "")
		plen := min(info.MaxGSOSegments*536, 65535-(len(hdr)-14))
		_, pay := tcpPacket(t, false, plen, "")
		views := worstViews(pay, max(1, info.MaxGSOViews))
		mss := 1448
		if err := r.nic.TransmitGSO(hdr, views, tso.Options{Type: tso.TCP, MSS: mss}, "p"); err != nil {
			t.Fatalf("ring %d (%d views, %d payload descriptors, info %+v): %v", ring, len(views), descs(views), info, err)
		}
		r.nic.Poll()
		var got []byte
		for _, f := range c.take() {
			got = append(got, f[len(hdr):]...)
		}
		if !bytes.Equal(got, pay) {
			t.Errorf("ring %d: %d payload bytes arrived, %d sent (or different)", ring, len(got), len(pay))
		}
		if ms := r.model.Stats(); ms.TxMaxDataDescs > e1000etest.MaxTxFrags {
			t.Errorf("ring %d: a packet took %d data descriptors", ring, ms.TxMaxDataDescs)
		}
		// One more view (still the worst case) may not fit: then it is
		// refused as never sendable, not as ring full.
		if more := worstViews(pay, info.MaxGSOViews+1); 2+descs(more) > min(ring-1, 1+e1000e.MaxDataDescs) {
			err := r.nic.TransmitGSO(hdr, more, tso.Options{Type: tso.TCP, MSS: mss}, "q")
			if !errors.Is(err, e1000e.ErrFrame) || r.nic.Full(err) {
				t.Errorf("ring %d: %d views (%d descriptors): %v", ring, len(more), 2+descs(more), err)
			}
		}
	}
}

// TestTransmitManyFragments: a frame in more fragments than QEMU's
// 82574L gathers (64 data descriptors) is copied into one buffer and
// arrives whole; before, it went out as 100 data descriptors, which
// QEMU drops without a word.
func TestTransmitManyFragments(t *testing.T) {
	r := newRig(t, rigOptions{})
	c := capturing(r)
	hdr, pay := tcpPacket(t, false, 1000, "")
	frame := append(append([]byte(nil), hdr...), pay...)
	frags := [][]byte{hdr}
	for p := pay; len(p) > 0; p = p[10:] {
		frags = append(frags, p[:10])
	}
	if err := r.nic.Transmit(frags, false, "f"); err != nil {
		t.Fatal(err)
	}
	r.nic.Poll()
	out := c.take()
	if len(out) != 1 || !bytes.Equal(out[0], frame) {
		t.Fatalf("%d frames out, want the %d-byte frame", len(out), len(frame))
	}
	if ms := r.model.Stats(); ms.TxMaxDataDescs > e1000etest.MaxTxFrags {
		t.Errorf("frame took %d data descriptors", ms.TxMaxDataDescs)
	}
	if st := r.nic.Stats(); st.Tx.Copied != uint64(len(frame)) {
		t.Errorf("copied %d bytes, want %d", st.Tx.Copied, len(frame))
	}
}

// viewCounter records how many payload views the endpoint hands the
// device per GSO packet.
type viewCounter struct {
	netstack.Device
	mu             sync.Mutex
	maxViews, many int
}

func (v *viewCounter) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	err := v.Device.TransmitGSO(hdr, payload, o, cookie)
	if err == nil {
		v.mu.Lock()
		v.maxViews = max(v.maxViews, len(payload))
		if len(payload) > 1 {
			v.many++
		}
		v.mu.Unlock()
	}
	return err
}

// TestMultiViewGSOReferencedInPlace: 4 KiB writes queued behind a closed
// receive window (Nagle on, as in netstack's split tests) make GSO
// packets of several views. The endpoint hands them to the 82574L whole,
// views referenced in place: nothing gathered, nothing split, and the
// bytes arrive intact (SHA-256 end to end, checksums on the wire checked
// by gopacket). Before Info stated MaxGSOViews, the endpoint assumed one
// view and copied every such packet.
func TestMultiViewGSOReferencedInPlace(t *testing.T) {
	vc := &viewCounter{}
	a := newHostWrapped(t, 1, true, e1000e.INTx, func(d netstack.Device) netstack.Device { vc.Device = d; return vc })
	b := newHost(t, 2, true, e1000e.INTx)
	w := connect(t, a, b)
	t.Cleanup(func() {
		a.Close()
		b.Close()
		w.Check(t, 1514, false)
	})
	nagle := tcpip.TCPDelayEnabled(true)
	a.S.SetTransportProtocolOption(tcp.ProtocolNumber, &nagle)
	x := stacktest.Xfer{Write: 4096, Hold: 1 << 20, Timeout: time.Minute}
	if err := stacktest.Transfer(t, a.Host, b.Host, false, 5001, 3<<20, x); err != nil {
		t.Fatal(err)
	}
	st := a.ep.Stats()
	vc.mu.Lock()
	maxViews, many := vc.maxViews, vc.many
	vc.mu.Unlock()
	t.Logf("a: %d GSO packets, %d with several views (most %d), %d pieces, %d gathered; most data descriptors per packet %d",
		st.TxGSOPackets, many, maxViews, st.TxSplitPieces, st.TxGathered, a.r.model.Stats().TxMaxDataDescs)
	if many == 0 && st.TxGathered == 0 {
		t.Fatal("no GSO packet came in several views: the test shows nothing")
	}
	if st.TxGathered != 0 || st.TxSplitPieces != 0 || st.TxErrors != 0 {
		t.Errorf("endpoint gathered %d, split into %d pieces, %d errors: multi-view GSO packets not referenced in place", st.TxGathered, st.TxSplitPieces, st.TxErrors)
	}
	if lim := vc.Device.Info().MaxGSOViews; maxViews > lim {
		t.Errorf("device got %d views, Info states %d", maxViews, lim)
	}
}
