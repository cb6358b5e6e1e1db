package connectx_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/tso"
)

// Decoders never panic, and what decodes re-encodes to the same fields.

func FuzzCmdEntry(f *testing.F) {
	f.Add(append([]byte{7}, make([]byte, 63)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := connectx.DecodeCmdEntry(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		e.Encode(out)
		e2, err := connectx.DecodeCmdEntry(out)
		if err != nil || e2 != e {
			t.Fatalf("round trip %+v -> %+v %v", e, e2, err)
		}
	})
}

func FuzzMailbox(f *testing.F) {
	f.Add(make([]byte, connectx.MailboxSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := connectx.DecodeMailbox(b)
		if err != nil {
			return
		}
		out := make([]byte, connectx.MailboxSize)
		m.Encode(out)
		m2, _ := connectx.DecodeMailbox(out)
		if m2 != m {
			t.Fatal("round trip")
		}
	})
}

func FuzzWQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add(append(make([]byte, 28), 0, 18))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := connectx.DecodeCtrlSeg(b)
		if err != nil {
			return
		}
		out := make([]byte, 16)
		c.Encode(out)
		if c2, _ := connectx.DecodeCtrlSeg(out); c2 != c {
			t.Fatal("ctrl round trip")
		}
		e, n, err := connectx.DecodeEthSeg(b[16:])
		if err != nil {
			return
		}
		if n != connectx.InlineDS(len(e.Inline))*16 || n > len(b)-16 {
			t.Fatalf("eth segment size %d for %d inline bytes", n, len(e.Inline))
		}
		w := make([]byte, n)
		if e.Encode(w) != n {
			t.Fatal("eth size")
		}
		e2, _, err := connectx.DecodeEthSeg(w)
		if err != nil || e2.MSS != e.MSS || e2.CsFlags != e.CsFlags || !bytes.Equal(e2.Inline, e.Inline) {
			t.Fatal("eth round trip")
		}
		if d, err := connectx.DecodeDataSeg(b[16+n:]); err == nil {
			out := make([]byte, 16)
			d.Encode(out)
			if d2, _ := connectx.DecodeDataSeg(out); d2 != d {
				t.Fatal("data round trip")
			}
		}
	})
}

func FuzzCQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := connectx.DecodeCQE(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		c.Encode(out)
		if c2, err := connectx.DecodeCQE(out); err != nil || c2 != c {
			t.Fatalf("round trip %+v %+v", c, c2)
		}
	})
}

func FuzzEQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := connectx.DecodeEQE(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		e.Encode(out)
		e2, _ := connectx.DecodeEQE(out)
		if e2 != e {
			t.Fatal("round trip")
		}
		e.PageRequest()
		e.CQN()
	})
}

// FuzzLSO sends TCP packets of fuzzed size, MSS, header options and view
// layout through the driver's LSO path into the model, and checks every
// segment on the wire with gopacket: valid checksums, in-order payload that
// reassembles to what was sent, no segment over the MTU. Neither the driver
// nor the model may panic; a WQE the model refuses fails the run.
func FuzzLSO(f *testing.F) {
	f.Add(uint16(3000), uint16(1448), uint8(0), uint8(3), false)
	f.Add(uint16(65000), uint16(536), uint8(10), uint8(1), true)
	f.Add(uint16(1), uint16(88), uint8(40), uint8(7), false)
	f.Fuzz(func(t *testing.T, size, mss uint16, optLen uint8, views uint8, v6 bool) {
		if size == 0 || mss < 88 {
			return
		}
		optLen = optLen % 41 &^ 3
		a, _, w := pairRigs(t, connectxtest.RigOptions{})
		var frames [][]byte
		w.SetTap(func(_ int, fr []byte) { frames = append(frames, append([]byte(nil), fr...)) })
		hdr := fuzzHeaders(v6, int(optLen), int(size))
		pay := make([]byte, int(size))
		for i := range pay {
			pay[i] = byte(i*13 + 1)
		}
		var vs [][]byte
		n := int(views%8) + 1
		for i := 0; i < n; i++ {
			lo, hi := len(pay)*i/n, len(pay)*(i+1)/n
			if hi > lo {
				vs = append(vs, pay[lo:hi])
			}
		}
		err := a.NIC.TransmitGSO(hdr, vs, tso.Options{Type: tso.TCP, MSS: int(mss), NeedsCsum: true, CsumOffset: 16}, nil)
		if len(hdr)+int(mss) > 1514 || len(hdr)+len(pay) > 65536 {
			if err == nil && len(hdr)+len(pay) > 65536 {
				t.Fatalf("packet of %d bytes accepted", len(hdr)+len(pay))
			}
			a.Model.Violations() // an MSS too big for the MTU is the model's to refuse
			a.NIC.Poll()
			a.Completions()
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for i, fr := range frames {
			if err := pkttest.Checksums(fr); err != nil {
				t.Fatalf("segment %d: %v", i, err)
			}
			if len(fr) > 1514 {
				t.Fatalf("segment %d of %d bytes", i, len(fr))
			}
			got = append(got, fr[len(hdr):]...)
		}
		if len(frames) == 1 && len(frames[0]) == 60 {
			got = got[:len(pay)] // padded runt
		}
		if !bytes.Equal(got, pay) {
			t.Fatalf("payload of %d bytes reassembled to %d", len(pay), len(got))
		}
		a.NIC.Poll()
	})
}

// fuzzHeaders builds Ethernet, IP and TCP headers with optLen bytes of TCP
// options (NOPs) and the pseudo-header sum in the checksum field.
func fuzzHeaders(v6 bool, optLen, paylen int) []byte {
	l3 := 14
	ipLen := 20
	if v6 {
		ipLen = 40
	}
	l4 := l3 + ipLen
	tl := 20 + optLen
	h := make([]byte, l4+tl)
	copy(h, []byte{2, 0xC7, 0, 0, 0, 2, 2, 0xC7, 0, 0, 0, 1})
	if v6 {
		h[12], h[13] = 0x86, 0xDD
		h[l3] = 0x60
		binary.BigEndian.PutUint16(h[l3+4:], uint16(tl+paylen))
		h[l3+6], h[l3+7] = 6, 64
		h[l3+8], h[l3+23] = 0xfd, 1
		h[l3+24], h[l3+39] = 0xfd, 2
	} else {
		h[12], h[13] = 0x08, 0x00
		h[l3] = 0x45
		binary.BigEndian.PutUint16(h[l3+2:], uint16(ipLen+tl+paylen))
		h[l3+8], h[l3+9] = 64, 6
		copy(h[l3+12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(h[l3+10:], ^fold(sum(h[l3:l4])))
	}
	binary.BigEndian.PutUint16(h[l4:], 1234)
	binary.BigEndian.PutUint16(h[l4+2:], 80)
	binary.BigEndian.PutUint32(h[l4+4:], 0xFFFFFF00)
	h[l4+12] = byte(tl/4) << 4
	h[l4+13] = 0x18
	for i := l4 + 20; i < len(h); i++ {
		h[i] = 1 // NOP
	}
	var ps uint32
	if v6 {
		ps = sum(h[l3+8 : l3+40])
	} else {
		ps = sum(h[l3+12 : l3+20])
	}
	binary.BigEndian.PutUint16(h[l4+16:], fold(ps+6+uint32(tl+paylen)))
	return h
}
