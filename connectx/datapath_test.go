package connectx_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/tso"
)

// tcpHeaders builds Ethernet/IP/TCP headers (timestamps option) for a TCP
// packet carrying paylen bytes, with the checksum field holding the
// pseudo-header sum over the whole packet (gVisor and Linux under
// CHECKSUM_PARTIAL) or zero.
func tcpHeaders(t *testing.T, v6 bool, paylen int, flags uint8, seeded bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xC7, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0xC7, 0, 0, 0, 2}}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, Seq: 0xFFFFF000, Ack: 77, DataOffset: 8, Window: 1000,
		FIN: flags&1 != 0, PSH: flags&8 != 0, ACK: true, CWR: flags&0x80 != 0,
		Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}}
	var ip gopacket.SerializableLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 0xFFFE, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
			SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, tcp, gopacket.Payload(make([]byte, paylen))); err != nil {
		t.Fatal(err)
	}
	f := buf.Bytes()
	hl := len(f) - paylen
	h := append([]byte(nil), f[:hl]...)
	l4 := 14 + 20
	if v6 {
		l4 = 14 + 40
	}
	if !v6 {
		binary.BigEndian.PutUint16(h[14+10:], ^fold(sum(h[14:34])))
	}
	h[l4+16], h[l4+17] = 0, 0
	if seeded {
		var s uint32
		if v6 {
			s = sum(h[14+8 : 14+40])
		} else {
			s = sum(h[14+12 : 14+20])
		}
		binary.BigEndian.PutUint16(h[l4+16:], fold(s+6+uint32(hl-l4+paylen)))
	}
	return h
}

type capture struct{ frames [][]byte }

func (c *capture) tap(_ int, f []byte) { c.frames = append(c.frames, append([]byte(nil), f...)) }

// LSO on the wire: segments decoded by gopacket show per-segment sequence
// numbers, IPv4 IDs, lengths, flags and valid checksums, and carry the
// payload in order.
func TestLSOOnTheWire(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, seeded := range []bool{false, true} {
			a, b, w := pairRigs(t, connectxtest.RigOptions{})
			c := &capture{}
			w.SetTap(c.tap)
			payload := make([]byte, 10000)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			hdr := tcpHeaders(t, v6, len(payload), 0x01|0x08|0x80, seeded)
			views := [][]byte{payload[:1], payload[1:5000], payload[5000:]}
			if err := a.NIC.TransmitGSO(hdr, views, tso.Options{Type: tso.TCP, MSS: 1400, NeedsCsum: true, CsumOffset: 16}, "lso"); err != nil {
				t.Fatal(err)
			}
			a.NIC.Poll()
			if d := a.Completions(); len(d) != 1 || d[0].Err != nil {
				t.Fatalf("completions %+v", d)
			}
			if len(c.frames) != 8 {
				t.Fatalf("v6=%v: %d segments, want 8", v6, len(c.frames))
			}
			var got []byte
			for i, f := range c.frames {
				if err := pkttest.Checksums(f); err != nil {
					t.Fatalf("v6=%v seeded=%v segment %d: %v", v6, seeded, i, err)
				}
				p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
				tc := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
				last := i == len(c.frames)-1
				if tc.Seq != 0xFFFFF000+uint32(i*1400) || tc.FIN != last || tc.PSH != last || tc.CWR != (i == 0) || !tc.ACK ||
					len(tc.Options) < 3 {
					t.Fatalf("segment %d: seq %#x FIN %v PSH %v CWR %v", i, tc.Seq, tc.FIN, tc.PSH, tc.CWR)
				}
				if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
					if ip.Id != uint16(0xFFFE+i) || ip.Flags != layers.IPv4DontFragment || int(ip.Length) != len(f)-14 {
						t.Fatalf("segment %d: IPv4 ID %#x length %d of %d", i, ip.Id, ip.Length, len(f))
					}
				} else if ip6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); int(ip6.Length) != len(f)-54 {
					t.Fatalf("segment %d: IPv6 payload length %d of %d", i, ip6.Length, len(f))
				}
				got = append(got, tc.Payload...)
			}
			if !bytes.Equal(got, payload) {
				t.Fatal("payload differs")
			}
			_ = b
		}
	}
}

func TestSmallGSOIsAPlainSend(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{})
	c := &capture{}
	w.SetTap(c.tap)
	hdr := tcpHeaders(t, false, 100, 0x08, true)
	if err := a.NIC.TransmitGSO(hdr, [][]byte{make([]byte, 100)}, tso.Options{Type: tso.TCP, MSS: 1448}, nil); err != nil {
		t.Fatal(err)
	}
	if len(c.frames) != 1 || a.NIC.Stats().TxLSO != 0 {
		t.Fatalf("%d frames, %d LSO", len(c.frames), a.NIC.Stats().TxLSO)
	}
	if err := pkttest.Checksums(c.frames[0]); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []tso.Options{{Type: tso.UDPFragment, MSS: 1400}, {Type: tso.TCP, MSS: tso.MinTCPMSS - 1}} {
		if err := a.NIC.TransmitGSO(hdr, [][]byte{make([]byte, 3000)}, bad, nil); !errors.Is(err, connectx.ErrBadPacket) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if err := a.NIC.TransmitGSO(hdr[:40], nil, tso.Options{Type: tso.TCP, MSS: 1448}, nil); !errors.Is(err, connectx.ErrBadPacket) {
		t.Errorf("truncated headers: %v", err)
	}
	if err := a.NIC.Transmit([][]byte{make([]byte, 2000)}, false, nil); !errors.Is(err, connectx.ErrBadPacket) {
		t.Errorf("oversized frame: %v", err)
	}
}

// A small ring filled with multi-WQEBB sends: the ring reports full, NOP
// padding keeps WQEs from crossing its end, and the 16-bit WQE counter wraps
// (more than 65536 WQEBBs), all without a model violation.
func TestRingFullWrapAndCounterWrap(t *testing.T) {
	a, b, w := pairRigs(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.TxRing = 32 }})
	frame := udp4(make([]byte, 400), false)
	frags := [][]byte{frame[:30]}
	for i := 30; i < len(frame); i += 32 {
		frags = append(frags, frame[i:min(i+32, len(frame))])
	}
	got := 0
	w.SetTap(func(int, []byte) { got++ })
	full := 0
	sent := 0
	for sent < 14000 {
		if sent%50 == 0 {
			a.Model.SetFaults(connectxtest.Faults{HoldTx: true})
		}
		err := a.NIC.Transmit(frags, true, sent)
		if err != nil {
			if !a.NIC.Full(err) {
				t.Fatalf("after %d sends: %v (model %+v)", sent, err, a.Model.Stats())
			}
			if full++; full > 3*sent+100 {
				t.Fatalf("ring stays full after %d sends: driver %+v model %+v", sent, a.NIC.Stats(), a.Model.Stats())
			}
			a.Model.ReleaseTx()
			a.NIC.Poll()
			continue
		}
		sent++
		if sent%100 == 0 {
			for {
				f, _ := b.NIC.Receive()
				if f == nil {
					break
				}
				f.Release()
			}
		}
	}
	a.NIC.Poll()
	if full == 0 {
		t.Error("ring never full")
	}
	if got != sent || len(a.Completions()) != sent {
		t.Fatalf("%d sent, %d on the wire", sent, got)
	}
	if st := a.Model.Stats(); st.TxWQEErrors != 0 || st.Doorbells != sent {
		t.Fatalf("model %+v", st)
	}
}

// A WQE the card refuses (a frame beyond the port's MTU) completes with an
// error, the SQ is recovered, and later sends go through.
func TestSendErrorRecovers(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.PortMTU = 1000 }})
	n := 0
	w.SetTap(func(int, []byte) { n++ })
	if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 1400), true)}, false, "big"); err != nil {
		t.Fatal(err)
	}
	a.NIC.Poll()
	d := a.Completions()
	if len(d) != 1 || !errors.Is(d[0].Err, connectx.ErrSendFailed) {
		t.Fatalf("completions %+v", d)
	}
	if v := a.Model.Violations(); len(v) != 1 || !strings.Contains(v[0], "MTU") {
		t.Fatalf("model saw %v", v)
	}
	for i := 0; i < 40; i++ {
		if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 100), true)}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	a.NIC.Poll()
	if d := a.Completions(); len(d) != 40 || d[39].Err != nil || n != 40 {
		t.Fatalf("%d completions, %d frames after recovery", len(d), n)
	}
	if a.NIC.Stats().SQRecoveries != 1 {
		t.Fatal("no recovery counted")
	}
}

func TestPageRequestsAndLink(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	r.Model.RequestPages(8)
	r.NIC.Poll()
	if st := r.Model.State(); st.Pages != 28 {
		t.Fatalf("pages %d after a request for 8 more", st.Pages)
	}
	r.Model.RequestPages(-6)
	r.NIC.Poll()
	if st := r.Model.State(); st.Pages != 22 {
		t.Fatalf("pages %d after offering 6 back", st.Pages)
	}
	r.Model.SetLink(false)
	r.NIC.Poll()
	if r.NIC.Link() {
		t.Fatal("link still up")
	}
	r.Model.SetLink(true)
	r.NIC.Poll()
	// Three port changes: the port came up when bring-up set its admin
	// status UP (PAOS), then down and up.
	if s := r.NIC.Stats(); !r.NIC.Link() || s.PageRequests != 2 || s.PortChanges != 3 || s.Events != 5 {
		t.Fatalf("stats %+v", s)
	}
	// Many events: the EQ consumer doorbell keeps the EQ from overrunning.
	for i := 0; i < 200; i++ {
		r.Model.SetLink(i%2 == 0)
		r.NIC.Poll()
	}
}

// TestPageRequestCantGive: a run-time page request beyond MaxPages is
// refused and answered MANAGE_PAGES "cannot give" (op_mod 0, as Linux's
// page_notify_fail), which the model records; the firmware then makes do
// with what it holds, and a later request within the limit is served.
func TestPageRequestCantGive(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.MaxPages = 30 }})
	r.Model.RequestPages(100)
	r.NIC.Poll()
	s := r.NIC.Stats()
	if s.PageRequests != 1 || s.PageRefused != 1 || s.PageCantGive != 1 || s.PageCantGiveFailed != 0 {
		t.Fatalf("driver stats %+v", s)
	}
	if ms := r.Model.Stats(); ms.PagesCantGive != 1 {
		t.Fatalf("model recorded %d cannot-give answers", ms.PagesCantGive)
	}
	if st := r.Model.State(); st.Pages != 20 {
		t.Fatalf("pages %d after a refused request", st.Pages)
	}
	r.Model.RequestPages(5)
	r.NIC.Poll()
	if st, s := r.Model.State(), r.NIC.Stats(); st.Pages != 25 || s.PageCantGive != 1 {
		t.Fatalf("pages %d, stats %+v after a request for 5", st.Pages, s)
	}
	if v := r.Model.Violations(); len(v) != 0 {
		t.Fatalf("violations %q", v)
	}
}

func TestReceiveOutOfBuffers(t *testing.T) {
	a, b, _ := pairRigs(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.RxRing = 16 }})
	for i := 0; i < 20; i++ {
		if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 64), true)}, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	var held []interface{ Release() error }
	for {
		f, err := b.NIC.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if f == nil {
			break
		}
		held = append(held, f)
	}
	if len(held) != 16 || b.Model.Stats().RxNoBuffer != 4 {
		t.Fatalf("%d frames, model %+v", len(held), b.Model.Stats())
	}
	for _, f := range held {
		f.Release()
	}
	if err := held[0].Release(); err == nil {
		t.Fatal("double release accepted")
	}
	if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 64), true)}, false, nil); err != nil {
		t.Fatal(err)
	}
	if f, _ := b.NIC.Receive(); f == nil {
		t.Fatal("no frame after buffers came back")
	} else {
		f.Release()
	}
}

// The model catches a 64-bit doorbell whose halves are not written as an
// ordered pair, and doorbell bytes that are not the WQE's first 8 bytes.
func TestDoorbellMisuse(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	const uar = 1 * 4096 // the model's first UAR page, the driver's
	r.Model.Write32(uar+0x804, 0)
	if v := r.Model.Violations(); len(v) != 1 || !strings.Contains(v[0], "second half") {
		t.Fatalf("halves out of order: %v", v)
	}
	if err := r.NIC.Transmit([][]byte{udp4(make([]byte, 10), true)}, false, nil); err != nil {
		t.Fatal(err)
	}
	r.Model.Write32(uar+0x800, 0x12345678)
	r.Model.Write32(uar+0x804, 0x9ABCDEF0)
	v := r.Model.Violations()
	if len(v) == 0 || !strings.Contains(strings.Join(v, " "), "doorbell") {
		t.Fatalf("bad doorbell bytes: %v", v)
	}
}

// LSO WQEs of every size from 2 to 16 WQEBBs (1 to 57 payload views), at
// every start offset of the smallest ring (32 WQEBBs), segment correctly.
func TestLSOAllSizesAndOffsets(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.TxRing = 32 }})
	var got []byte
	frames := 0
	const hl = 14 + 20 + 32
	w.SetTap(func(_ int, f []byte) { got = append(got, f[hl:]...); frames++ })
	payload := make([]byte, 2120)
	for i := range payload {
		payload[i] = byte(i)
	}
	sizes := map[int]bool{}
	for round := 0; round < 3; round++ {
		for k := 1; k <= 57; k++ {
			hdr := tcpHeaders(t, false, len(payload), 0x08, true)
			if len(hdr) != hl {
				t.Fatalf("headers of %d bytes", len(hdr))
			}
			var vs [][]byte
			for i := 0; i < k; i++ {
				vs = append(vs, payload[len(payload)*i/k:len(payload)*(i+1)/k])
			}
			ds := 1 + connectx.InlineDS(hl) + k
			sizes[(ds+3)/4] = true
			got, frames = got[:0], 0
			// The model completes sends at once: the ring is never full.
			if err := a.NIC.TransmitGSO(hdr, vs, tso.Options{Type: tso.TCP, MSS: 1000}, k); err != nil {
				t.Fatalf("%d views: %v", k, err)
			}
			if frames != 3 || !bytes.Equal(got, payload) {
				t.Fatalf("%d views: %d frames, payload equal %v", k, frames, bytes.Equal(got, payload))
			}
		}
	}
	a.NIC.Poll()
	for _, d := range a.Completions() {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
	}
	for n := 2; n <= 16; n++ {
		if !sizes[n] {
			t.Errorf("no WQE of %d WQEBBs", n)
		}
	}
	// 58 views do not fit one WQE (66 inline bytes: 1+5+58 DS): gathered
	// into a bounce buffer and sent, not refused.
	var vs [][]byte
	for i := 0; i < 58; i++ {
		vs = append(vs, payload[i*30:i*30+30])
	}
	got, frames = got[:0], 0
	if err := a.NIC.TransmitGSO(tcpHeaders(t, false, 58*30, 0, true), vs, tso.Options{Type: tso.TCP, MSS: 1000}, nil); err != nil {
		t.Fatalf("58 views: %v", err)
	}
	if frames != 2 || !bytes.Equal(got, payload[:58*30]) || a.NIC.Stats().TxGathered != 1 {
		t.Fatalf("58 views: %d frames, payload equal %v, gathered %d", frames, bytes.Equal(got, payload[:58*30]), a.NIC.Stats().TxGathered)
	}
}

// TestLSOTakesTheViewsInfoStates: Info states how many payload views an
// LSO send may come in (else the endpoint gathers every multi-view packet
// into one buffer), and a packet in that many views goes out whole, each
// view gathered in place; more views than a WQE can carry (63 data
// segments and more) are copied into one bounce buffer and sent whole.
func TestLSOTakesTheViewsInfoStates(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{})
	c := &capture{}
	w.SetTap(c.tap)
	nv := a.NIC.Info().MaxGSOViews
	if nv < 2 {
		t.Fatalf("MaxGSOViews %d: multi-view LSO packets would be copied", nv)
	}
	payload := make([]byte, nv*100)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	views := make([][]byte, nv)
	for i := range views {
		views[i] = payload[i*100 : (i+1)*100]
	}
	hdr := tcpHeaders(t, false, len(payload), 0x10, false)
	o := tso.Options{Type: tso.TCP, MSS: 1000, NeedsCsum: true, CsumOffset: 16}
	if err := a.NIC.TransmitGSO(hdr, views, o, "whole"); err != nil {
		t.Fatalf("%d views: %v", nv, err)
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
	if !bytes.Equal(got, payload) {
		t.Fatalf("%d segments, %d payload bytes of %d, or they differ", len(c.frames), len(got), len(payload))
	}
	more := make([][]byte, 63)
	for i := range more {
		more[i] = payload[i : i+1]
	}
	if err := a.NIC.TransmitGSO(tcpHeaders(t, false, len(more), 0x10, false), more, o, "more"); err != nil {
		t.Fatalf("%d views: %v", len(more), err)
	}
	if st := a.NIC.Stats(); st.TxGathered != 1 {
		t.Fatalf("%d views: gathered %d", len(more), st.TxGathered)
	}
}
