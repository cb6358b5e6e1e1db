package connectx_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestInlineHeadersUpToTheScratchAreTheFrames: with the vport asking for TCP/UDP
// inline (min_wqe_inline_mode 3, Linux mlx5e_calc_min_inline
// MLX5_INLINE_MODE_TCP_UDP: every header), an IPv6 TCP frame whose headers
// end past byte 200 (a 128-byte destination options header and a 60-byte
// TCP header: 14+40+128+60 = 242) must go out byte for byte. Transmit copies
// only the first 200 bytes into the inline scratch, yet inlines 242 of it.
func TestInlineHeadersUpToTheScratchAreTheFrames(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) {
		o.WQEInlineMode, o.MinInlineMode = 1, 3
	}})
	var got [][]byte
	w.SetTap(func(_ int, f []byte) { got = append(got, append([]byte(nil), f...)) })
	payload := bytes.Repeat([]byte{0xA5}, 100)
	f := make([]byte, 14+40+128+60+len(payload))
	copy(f[0:6], []byte{2, 0xC7, 0, 0, 0, 2})
	copy(f[6:12], []byte{2, 0xC7, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x86DD)
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(f)-54))
	ip[6], ip[7] = 60, 64 // destination options next
	ip[8+15], ip[24+15] = 1, 2
	do := f[54:]
	do[0], do[1] = 6, 15 // next TCP, (15+1)*8 = 128 bytes
	for i := 2; i < 128; i++ {
		do[i] = 0x01 // PadN would be 1; fill is opaque here
	}
	tcp := f[182:]
	binary.BigEndian.PutUint16(tcp[0:], 1234)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 15 << 4
	tcp[13] = 0x18
	for i := 20; i < 60; i++ {
		tcp[i] = 0x01 // NOP options
	}
	copy(f[242:], payload)
	if err := a.NIC.Transmit([][]byte{f}, false, 1); err != nil {
		t.Fatal(err)
	}
	a.NIC.Poll()
	if len(got) != 1 {
		t.Fatalf("%d frames", len(got))
	}
	if !bytes.Equal(got[0], f) {
		for i := range f {
			if i >= len(got[0]) || got[0][i] != f[i] {
				t.Fatalf("frame differs from byte %d (sent %d bytes, wire %d): wire % x, sent % x", i, len(f), len(got[0]), got[0][i:min(i+8, len(got[0]))], f[i:i+8])
			}
		}
	}
}

// TestInlineIPModeHeadersPast200Bytes: the same 200-byte window, IP mode
// (min_wqe_inline_mode 2: up to the transport header, Linux
// mlx5e_calc_min_inline MLX5_INLINE_MODE_IP): an IPv6 UDP frame behind a
// 160-byte destination options header (transport header at 214) no longer
// parses within the window, so only 18 bytes go inline; the card refuses
// the WQE (error CQE, SQ to ERR, every queued send flushed). Wanted: the
// frame on the wire, completed without error.
func TestInlineIPModeHeadersPast200Bytes(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) {
		o.WQEInlineMode, o.MinInlineMode = 1, 2
	}})
	var got [][]byte
	w.SetTap(func(_ int, f []byte) { got = append(got, append([]byte(nil), f...)) })
	f := make([]byte, 14+40+160+8+64)
	copy(f[0:6], []byte{2, 0xC7, 0, 0, 0, 2})
	copy(f[6:12], []byte{2, 0xC7, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x86DD)
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(f)-54))
	ip[6], ip[7] = 60, 64
	do := f[54:]
	do[0], do[1] = 17, 19 // next UDP, (19+1)*8 = 160 bytes
	do[2], do[3] = 1, 156 // PadN covering the rest
	binary.BigEndian.PutUint16(f[214:], 1000)
	binary.BigEndian.PutUint16(f[216:], 2000)
	binary.BigEndian.PutUint16(f[218:], 8+64)
	if err := a.NIC.Transmit([][]byte{f}, false, 1); err != nil {
		t.Fatal(err)
	}
	a.NIC.Poll()
	d := a.Completions()
	if len(d) != 1 || d[0].Err != nil || len(got) != 1 || !bytes.Equal(got[0], f) {
		t.Fatalf("completions %+v, %d frames on the wire, SQ recoveries %d", d, len(got), a.NIC.Stats().SQRecoveries)
	}
}
