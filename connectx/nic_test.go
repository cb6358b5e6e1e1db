package connectx_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/pkttest"
)

// pairRigs builds two NICs joined by a wire.
func pairRigs(t *testing.T, o connectxtest.RigOptions) (a, b *connectxtest.Rig, w *connectxtest.Wire) {
	t.Helper()
	oa, ob := o, o
	oa.MAC, ob.MAC = [6]byte{2, 0xC7, 0, 0, 0, 1}, [6]byte{2, 0xC7, 0, 0, 0, 2}
	a, b = connectxtest.NewRig(t, oa), connectxtest.NewRig(t, ob)
	w = connectxtest.Connect(a.Model, b.Model)
	return a, b, w
}

// udp4 builds an Ethernet/IPv4/UDP frame with valid checksums unless zero.
func udp4(payload []byte, csum bool) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:6], []byte{2, 0xC7, 0, 0, 0, 2})
	copy(f[6:12], []byte{2, 0xC7, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	u := ip[20:]
	binary.BigEndian.PutUint16(u[0:], 1000)
	binary.BigEndian.PutUint16(u[2:], 2000)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	copy(u[8:], payload)
	if csum {
		setCsums(f)
	}
	return f
}

func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// setCsums fills IPv4 header and UDP/TCP checksums (IPv4 only), for frames
// built here.
func setCsums(f []byte) {
	ip := f[14:]
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip[:20])))
	l4 := ip[20:binary.BigEndian.Uint16(ip[2:])]
	off := 6
	if ip[9] == 6 {
		off = 16
	}
	l4[off], l4[off+1] = 0, 0
	ps := sum(ip[12:20]) + uint32(ip[9]) + uint32(len(l4))
	binary.BigEndian.PutUint16(l4[off:], ^fold(ps+sum(l4)))
}

func TestBringUpAndTeardown(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{MAC: [6]byte{2, 1, 2, 3, 4, 5}})
	if r.NIC.MAC() != [6]byte{2, 1, 2, 3, 4, 5} {
		t.Fatalf("MAC %x", r.NIC.MAC())
	}
	if !r.NIC.Link() {
		t.Fatal("link down")
	}
	c := r.NIC.Caps()
	if !c.CsumCap || c.MaxLSO != 65536 {
		t.Fatalf("caps %+v", c)
	}
	st := r.Model.State()
	if !st.Enabled || !st.Initialized || st.Pages != 20 || st.Objects == 0 {
		t.Fatalf("model state %+v", st)
	}
}

func TestSendReceiveUDP(t *testing.T) {
	a, b, w := pairRigs(t, connectxtest.RigOptions{})
	var seen [][]byte
	w.SetTap(func(from int, f []byte) { seen = append(seen, append([]byte(nil), f...)) })
	payload := bytes.Repeat([]byte("connectx"), 100)
	f := udp4(payload, false)
	// Two fragments; checksums left to the card.
	if err := a.NIC.Transmit([][]byte{f[:30], f[30:]}, true, "one"); err != nil {
		t.Fatal(err)
	}
	a.NIC.Poll()
	if d := a.Completions(); len(d) != 1 || d[0].Cookie != "one" || d[0].Err != nil {
		t.Fatalf("completions %+v", d)
	}
	if len(seen) != 1 {
		t.Fatalf("%d frames on the wire", len(seen))
	}
	if err := pkttest.Checksums(seen[0]); err != nil {
		t.Fatalf("wire frame: %v", err)
	}
	b.NIC.Poll()
	fr, err := b.NIC.Receive()
	if err != nil || fr == nil {
		t.Fatalf("receive: %v %v", fr, err)
	}
	if !bytes.Equal(fr.Bytes(), seen[0]) {
		t.Fatal("received frame differs from the wire")
	}
	if ip, l4 := fr.Verified(); !ip || !l4 {
		t.Fatalf("verdicts %v %v", ip, l4)
	}
	if cs, want := fr.(*connectx.Frame).CheckSum(), fold(sum(seen[0][14:14+20+8+len(payload)])); cs != want {
		t.Fatalf("CQE check_sum %#x, want %#x", cs, want)
	}
	// A corrupted frame arrives without the L4 verdict.
	bad := udp4(payload, true)
	bad[50] ^= 0xFF
	if err := a.NIC.Transmit([][]byte{bad}, false, "bad"); err != nil {
		t.Fatal(err)
	}
	fb, err := b.NIC.Receive()
	if err != nil || fb == nil {
		t.Fatalf("receive: %v", err)
	}
	if ip, l4 := fb.Verified(); !ip || l4 {
		t.Fatalf("corrupted frame verdicts %v %v", ip, l4)
	}
	fb.Release()
	if err := fr.Release(); err != nil {
		t.Fatal(err)
	}
	if fr, err := b.NIC.Receive(); fr != nil || err != nil {
		t.Fatalf("second receive %v %v", fr, err)
	}
}
