package netstack

import (
	"encoding/binary"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/internal/pkt"
)

// fragments builds the IPv4 fragments (Ethernet framed) of a UDP datagram
// carrying data, fragment payloads of size bytes, with a correct checksum.
func fragments(t *testing.T, id uint16, data []byte, size int) [][]byte {
	udp := make([]byte, 8+len(data))
	binary.BigEndian.PutUint16(udp[0:], 1000)
	binary.BigEndian.PutUint16(udp[2:], 7)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], data)
	ipTmpl := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	binary.BigEndian.PutUint16(ipTmpl[4:], id)
	c := ^pkt.Fold(pkt.Sum(pkt.PseudoSum(ipTmpl, false, 17, len(udp)), udp))
	binary.BigEndian.PutUint16(udp[6:], c)
	var out [][]byte
	for off := 0; off < len(udp); off += size {
		n := min(size, len(udp)-off)
		f := make([]byte, 14+20+n)
		f[12], f[13] = 0x08, 0x00
		ip := f[14:34]
		copy(ip, ipTmpl)
		binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
		fo := uint16(off / 8)
		if off+n < len(udp) {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		binary.BigEndian.PutUint16(ip[10:], ^pkt.Fold(pkt.Sum(0, ip)))
		copy(f[34:], udp[off:off+n])
		out = append(out, f)
	}
	return out
}

func feed(t *testing.T, c *fragCheck, f []byte) (int, int) {
	h, err := pkt.Parse(f)
	if err != nil || !h.Fragment {
		t.Fatalf("not a fragment: %v", err)
	}
	p := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
	ready, dropped := c.add(f, h, p)
	for _, q := range ready {
		q.DecRef()
	}
	return len(ready), dropped
}

func TestFragCheckHoldsUntilVerified(t *testing.T) {
	var c fragCheck
	c.init()
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	fs := fragments(t, 1, data, 1000)
	// Out of order, with an exact duplicate: nothing is released until the
	// datagram is whole, then all four fragments at once.
	order := []int{2, 0, 0, 3}
	for _, i := range order {
		if r, d := feed(t, &c, fs[i]); r != 0 || d != 0 {
			t.Fatalf("fragment %d released %d, dropped %d before completion", i, r, d)
		}
	}
	if r, d := feed(t, &c, fs[1]); r != 4 || d != 0 {
		t.Fatalf("completion released %d, dropped %d; want 4, 0", r, d)
	}
	// A corrupted datagram: all of it is dropped, none delivered.
	bad := fragments(t, 2, data, 1000)
	bad[2][40] ^= 1
	total := 0
	for _, f := range bad {
		r, d := feed(t, &c, f)
		if r != 0 {
			t.Fatal("a corrupted datagram's fragment was released")
		}
		total += d
	}
	if total != 4 {
		t.Fatalf("dropped %d fragments, want 4", total)
	}
	// Overlapping fragments cannot be verified: dropped.
	ov := fragments(t, 3, data, 1000)
	shifted := fragments(t, 3, data, 1000)[0]
	binary.BigEndian.PutUint16(shifted[14+6:], 0x2000|uint16(504/8)) // overlaps the first
	binary.BigEndian.PutUint16(shifted[14+10:], 0)
	binary.BigEndian.PutUint16(shifted[14+10:], ^pkt.Fold(pkt.Sum(0, shifted[14:34])))
	feed(t, &c, ov[0])
	feed(t, &c, shifted)
	feed(t, &c, ov[1])
	feed(t, &c, ov[2])
	if r, _ := feed(t, &c, ov[3]); r != 0 {
		t.Fatal("an overlapping datagram was released")
	}
	if len(c.table) != 0 || c.bytes != 0 {
		t.Fatalf("state left: %d trackers, %d bytes", len(c.table), c.bytes)
	}
}

func TestFragCheckBoundsAndTimeout(t *testing.T) {
	var c fragCheck
	c.init()
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	data := make([]byte, 2000)
	// More incomplete datagrams than trackers: the oldest are dropped.
	dropped := 0
	for id := 0; id < fragTrackers+5; id++ {
		_, d := feed(t, &c, fragments(t, uint16(100+id), data, 1000)[0])
		dropped += d
	}
	if dropped != 5 || len(c.table) != fragTrackers {
		t.Fatalf("dropped %d, %d trackers", dropped, len(c.table))
	}
	// Old ones time out.
	now = now.Add(fragTimeout + time.Second)
	_, d := feed(t, &c, fragments(t, 9, data, 1000)[0])
	if d != fragTrackers || len(c.table) != 1 {
		t.Fatalf("timeout dropped %d, %d trackers left", d, len(c.table))
	}
	c.release()
	if len(c.table) != 0 || c.bytes != 0 {
		t.Fatal("release left state")
	}
}
