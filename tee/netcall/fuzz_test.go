package netcall_test

import (
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/tee/netcall"
)

// tcpHeader is an Ethernet, IPv4 and TCP header a segmenter accepts.
func tcpHeader(payload int) []byte {
	h := make([]byte, 54)
	copy(h, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00})
	ip := h[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(40+payload))
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	tcp := h[34:]
	binary.BigEndian.PutUint16(tcp[0:], 5000)
	binary.BigEndian.PutUint16(tcp[2:], 6000)
	tcp[12], tcp[13] = 5<<4, 0x18
	return h
}

// fuzzInput encodes a call and the bytes put at HostileScratch.
func fuzzInput(op netcall.Op, r1, r2, r3 uint32, scratch []byte) []byte {
	b := make([]byte, 16, 16+len(scratch))
	binary.LittleEndian.PutUint32(b, uint32(op))
	binary.LittleEndian.PutUint32(b[4:], r1)
	binary.LittleEndian.PutUint32(b[8:], r2)
	binary.LittleEndian.PutUint32(b[12:], r3)
	return append(b, scratch...)
}

// FuzzServer hands the Secure World arbitrary calls over arbitrary region
// contents: it must never panic, never touch memory outside the region,
// answer with a defined status, keep no staging buffer for a refused call,
// and keep answering well-formed calls.
func FuzzServer(f *testing.F) {
	const s = netcall.HostileScratch
	frame := make([]byte, 512)
	d := netcall.TxDesc{Kind: netcall.KindFrame, Extents: []netcall.Extent{{Off: s + 64, Len: 60}}}
	d.Encode(frame)
	copy(frame[64:], tcpHeader(6))
	f.Add(fuzzInput(netcall.OpTransmit, s, uint32(d.Size()), 0, frame))
	gso := make([]byte, 4096)
	d = netcall.TxDesc{Kind: netcall.KindGSO, GSOType: netcall.GSOTCP, MSS: 1000, Flags: netcall.FlagNeedsCsum, CsumOffset: 16,
		Extents: []netcall.Extent{{Off: s + 64, Len: 54}, {Off: s + 118, Len: 3000}}}
	d.Encode(gso)
	copy(gso[64:], tcpHeader(3000))
	f.Add(fuzzInput(netcall.OpTransmit, s, uint32(d.Size()), 0, gso))
	f.Add(fuzzInput(netcall.OpReceive, s, 8192, 4, nil))
	f.Add(fuzzInput(netcall.OpInfo, s, 24, 0, nil))
	f.Add(fuzzInput(netcall.OpStats, s, 8192, 0, nil))
	for _, c := range netcall.HostileCalls() {
		region := make([]byte, netcall.RegionSize)
		if c.Prepare != nil {
			c.Prepare(region)
		}
		f.Add(fuzzInput(c.Op, c.R1, c.R2, c.R3, region[s:s+512]))
	}
	sec := newSecure(f, 1)
	sec.rig.Model.SetPeer(func([]byte) {}) // the wire goes nowhere
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 16 {
			return
		}
		r := sec.region
		clear(r[s:])
		copy(r[s:], in[16:])
		le := binary.LittleEndian
		st, v := sec.srv.Handle(le.Uint32(in), le.Uint32(in[4:]), le.Uint32(in[8:]), le.Uint32(in[12:]))
		if st.String() == "" || st > netcall.StatusClosed {
			t.Fatalf("undefined status %d", st)
		}
		if netcall.Op(le.Uint32(in)) == netcall.OpReceive && st == netcall.StatusOK && v > le.Uint32(in[12:]) {
			t.Fatalf("%d frames for a batch of %d", v, le.Uint32(in[12:]))
		}
		sec.checkGuards(t)
		if st != netcall.StatusOK {
			if got := sec.srv.Stats(); uint64(got.Staging) > got.TxFrames+got.TxGSOPackets {
				t.Fatalf("staging buffers held by refused calls: %+v", got)
			}
		}
		if st, _ := sec.srv.Handle(uint32(netcall.OpInfo), 0, netcall.InfoSize, 0); st != netcall.StatusOK {
			t.Fatalf("a well-formed info call answered %v after the fuzzed one", st)
		}
	})
}
