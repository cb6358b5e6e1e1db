package connectx_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/tso"
)

// pieces cuts b into views of k bytes (the last may be shorter).
func pieces(b []byte, k int) [][]byte {
	var v [][]byte
	for len(b) > 0 {
		c := min(k, len(b))
		v = append(v, b[:c])
		b = b[c:]
	}
	return v
}

// wqeLimits are the send WQE sizes tried: the default 16 WQEBBs and the
// smallest the driver accepts, 4 (max_wqe_sz_sq 256 bytes).
var wqeLimits = []int{1024, 256}

// TestTransmitTakesAnyNumberOfFragments: netstack.Device says Transmit
// takes any number of fragments. 64 KiB of UDP payload in full-size
// frames, each given in 8-byte fragments (190 per frame) and in 1-byte
// ones, all arrive with valid checksums, byte for byte; the frames beyond
// one WQE's data segments are gathered (counted). With a card whose
// max_wqe_sz_sq is 256 bytes, 31 fragments are already too many for one
// WQE (16 DS): the driver reads the cap rather than assume 16 WQEBBs.
func TestTransmitTakesAnyNumberOfFragments(t *testing.T) {
	for _, lim := range wqeLimits {
		for _, k := range []int{50, 8, 1} {
			t.Run(fmt.Sprintf("wqe%d/frag%d", lim, k), func(t *testing.T) {
				a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.MaxWQESzSQ = lim }})
				c := &capture{}
				w.SetTap(c.tap)
				data := make([]byte, 64<<10)
				for i := range data {
					data[i] = byte(i*7 + i>>8)
				}
				sent := 0
				for off := 0; off < len(data); off += 1472 {
					f := udp4(data[off:min(off+1472, len(data))], false)
					frags := pieces(f, k)
					if err := a.NIC.Transmit(frags, true, off); err != nil {
						t.Fatalf("frame at %d in %d fragments: %v", off, len(frags), err)
					}
					sent++
					a.NIC.Poll()
				}
				for _, d := range a.Completions() {
					if d.Err != nil {
						t.Fatalf("completion %v: %v", d.Cookie, d.Err)
					}
				}
				var got []byte
				for i, f := range c.frames {
					if err := pkttest.Checksums(f); err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
					got = append(got, f[42:]...)
				}
				if len(c.frames) != sent || !bytes.Equal(got, data) {
					t.Fatalf("%d of %d frames, %d of %d bytes, equal %v", len(c.frames), sent, len(got), len(data), bytes.Equal(got, data))
				}
				// 31 fragments of 50 bytes go in place in 16 WQEBBs, not in 4.
				want := uint64(sent)
				if k == 50 && lim == 1024 {
					want = 0
				}
				if st := a.NIC.Stats(); st.TxGathered != want || st.TxBadPacket != 0 {
					t.Errorf("gathered %d of %d frames (want %d), %d refused", st.TxGathered, sent, want, st.TxBadPacket)
				}
			})
		}
	}
}

// TestTransmitGSOTakesAnyNumberOfViews: a 64 KiB LSO message whose
// payload comes in 8-byte views (8 k views; one WQE holds at most 63 DS)
// is sent whole: every segment checks, every byte arrives in order.
func TestTransmitGSOTakesAnyNumberOfViews(t *testing.T) {
	for _, lim := range wqeLimits {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("wqe%d/v6=%v", lim, v6), func(t *testing.T) {
				a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.MaxWQESzSQ = lim }})
				c := &capture{}
				w.SetTap(c.tap)
				hl := len(tcpHeaders(t, v6, 0, 0, true))
				payload := make([]byte, (1<<16-hl)&^7)
				for i := range payload {
					payload[i] = byte(i*5 + i>>9)
				}
				hdr := tcpHeaders(t, v6, len(payload), 0x08, true)
				o := tso.Options{Type: tso.TCP, MSS: 1400, NeedsCsum: true, CsumOffset: 16}
				if err := a.NIC.TransmitGSO(hdr, pieces(payload, 8), o, "big"); err != nil {
					t.Fatalf("%d views: %v", len(payload)/8, err)
				}
				a.NIC.Poll()
				if d := a.Completions(); len(d) != 1 || d[0].Err != nil {
					t.Fatalf("completions %+v", d)
				}
				var got []byte
				for i, f := range c.frames {
					if err := pkttest.Checksums(f); err != nil {
						t.Fatalf("segment %d: %v", i, err)
					}
					p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
					got = append(got, p.Layer(layers.LayerTypeTCP).(*layers.TCP).Payload...)
				}
				if want := (len(payload) + 1399) / 1400; len(c.frames) != want || !bytes.Equal(got, payload) {
					t.Fatalf("%d segments (want %d), %d of %d bytes, equal %v", len(c.frames), want, len(got), len(payload), bytes.Equal(got, payload))
				}
				if st := a.NIC.Stats(); st.TxGathered != 1 || st.TxLSO != 1 {
					t.Errorf("gathered %d, LSO %d", st.TxGathered, st.TxLSO)
				}
			})
		}
	}
}

// TestMaxTxDescsWithLongestInlineHeader: Info's MaxTxDescs holds beside
// the longest header the driver inlines, 142 bytes (two VLAN tags, IPv4
// and TCP headers of 60 bytes each) under the TCP/UDP inline mode: that
// is 10 DS with the eth segment (2 bytes in it, 140 in 9 more), so 52
// data segments, and such a frame goes in place, nothing gathered.
func TestMaxTxDescsWithLongestInlineHeader(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.MinInlineMode = 3 }})
	c := &capture{}
	w.SetTap(c.tap)
	if got := connectx.InlineDS(142); got != 10 {
		t.Fatalf("InlineDS(142) = %d, want 10", got)
	}
	nd := a.NIC.Info().MaxTxDescs
	f := make([]byte, 142+nd*8)
	copy(f, []byte{2, 0xC7, 0, 0, 0, 2, 2, 0xC7, 0, 0, 0, 1, 0x88, 0xA8, 0, 1, 0x81, 0, 0, 2, 0x08, 0})
	ip := f[22:]
	ip[0], ip[8], ip[9] = 0x4F, 64, 6 // IHL 15: 40 bytes of options (NOPs)
	for i := 20; i < 60; i++ {
		ip[i] = 1
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	tcp := ip[60:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12], tcp[13] = 15<<4, 0x18 // data offset 15: 40 bytes of options
	for i := 20; i < 60; i++ {
		tcp[i] = 1
	}
	for i := 142; i < len(f); i++ {
		f[i] = byte(i)
	}
	frags := append([][]byte{f[:142]}, pieces(f[142:], 8)...)
	if err := a.NIC.Transmit(frags, true, "hdr142"); err != nil {
		t.Fatalf("%d data fragments after a 142-byte header (MaxTxDescs %d): %v", nd, nd, err)
	}
	a.NIC.Poll()
	if d := a.Completions(); len(d) != 1 || d[0].Err != nil {
		t.Fatalf("completions %+v", d)
	}
	if len(c.frames) != 1 || !bytes.Equal(c.frames[0][142:], f[142:]) {
		t.Fatalf("%d frames, or the payload differs", len(c.frames))
	}
	if st := a.NIC.Stats(); st.TxGathered != 0 {
		t.Errorf("a frame within MaxTxDescs was gathered (%d)", st.TxGathered)
	}
}

// TestStackSmallWrites: 8 KiB written 8 bytes at a time while the
// receiver holds off reading, so that gVisor queues the writes behind its
// congestion window and builds segments of many small views (fewer data
// segments than writes, some past the card's gather list), arrive whole
// (SHA-256 compared), with LSO on and off.
//
// The size is bounded by gVisor, not by the driver: its receiver charges
// each queued segment its buffer overhead (about 550 bytes for 8 bytes of
// data in a 1 MiB buffer), so a held receiver fills after about 1,900
// tiny segments (the trace's ACKs stopped 15,288 bytes in) while still
// advertising a wide window. It drops what follows, and its sender then
// recovers at two 8-byte segments per 200 ms retransmission timeout. At
// 64 KiB, 5 of 16 transfers hit the 60 s timeout (session 10's wire
// trace: every frame delivered, RxNoBuffer 0 on both models, the loss
// inside the receiving stack). 8 KiB is 1,024 writes.
func TestStackSmallWrites(t *testing.T) {
	const n, write = 8 << 10, 8
	for _, lso := range []bool{false, true} {
		t.Run(fmt.Sprintf("lso=%v", lso), func(t *testing.T) {
			a, ra := cxHost(t, 1, lso)
			b, _ := cxHost(t, 2, lso)
			t.Cleanup(func() { a.close(); b.close() })
			w := connectxtest.Connect(a.port, b.port)
			var most atomic.Int64 // the longest TCP payload a sent
			// Once data flows, a's card holds its sends for 50 ms: no ACK
			// comes back, gVisor's congestion window fills and the writes
			// meanwhile queue behind it, to leave as segments of many
			// views. Without the hold, whether any write queued was up to
			// the host's timing: a CI run under load saw every segment
			// leave with one write (8 bytes) and failed.
			var hold sync.Once
			w.SetTap(func(from int, f []byte) {
				if from != 0 || len(f) < 54 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 6 {
					return
				}
				ihl := int(f[14]&15) * 4
				if len(f) < 14+ihl+20 {
					return
				}
				l := int(binary.BigEndian.Uint16(f[16:])) - ihl - int(f[14+ihl+12]>>4)*4
				if l > 0 {
					hold.Do(func() {
						go func() {
							ra.Model.SetFaults(connectxtest.Faults{HoldTx: true})
							time.Sleep(50 * time.Millisecond)
							ra.Model.ReleaseTx()
						}()
					})
				}
				for m := most.Load(); int64(l) > m && !most.CompareAndSwap(m, int64(l)); m = most.Load() {
				}
			})
			x := stacktest.Xfer{Write: write, Hold: n, Timeout: 60 * time.Second}
			if err := stacktest.Transfer(t, a.Host, b.Host, false, 5100, n, x); err != nil {
				t.Fatalf("%v\n== a\n%s== b\n%s", err, a.Diag(), b.Diag())
			}
			if m := most.Load(); m <= write {
				t.Errorf("the longest segment carried %d bytes: no segment was built of several %d-byte writes", m, write)
			}
			t.Logf("longest segment %d bytes, %d frames gathered into a bounce buffer", most.Load(), ra.NIC.Stats().TxGathered)
		})
	}
}
