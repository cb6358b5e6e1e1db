package netstack

import (
	"encoding/binary"
	"fmt"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// benchFrame is a received frame whose checksums the hardware verified.
type benchFrame []byte

func (f benchFrame) Bytes() []byte          { return f }
func (f benchFrame) Verified() (bool, bool) { return true, true }
func (f benchFrame) Release() error         { return nil }

// benchSeg is an Ethernet frame with one TCP segment of port sport, n
// payload bytes, over IPv4 or IPv6 (checksums left zero: the frame says
// the hardware verified them).
func benchSeg(v6 bool, sport uint16, seq uint32, n int) []byte {
	l3 := 20
	if v6 {
		l3 = 40
	}
	f := make([]byte, 14+l3+20+n)
	ip := f[14:]
	if v6 {
		binary.BigEndian.PutUint16(f[12:], 0x86DD)
		ip[0], ip[6], ip[7] = 0x60, 6, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(20+n))
		ip[8+15], ip[24+15] = 2, 1
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip[0], ip[8], ip[9] = 0x45, 64, 6
		binary.BigEndian.PutUint16(ip[2:], uint16(40+n))
		copy(ip[12:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	}
	tcp := ip[l3:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12], tcp[13] = 5<<4, 0x10
	return f
}

// BenchmarkRxGROBatch times the endpoint's receive path in GRO mode over
// one batch of 64 frames, as deliver and flushGRO run it for each batch
// (copy, parse, groOrder, gVisor's GRO; the dispatcher only counts):
// "data", 64 in-order 1448-byte segments of one flow (a receiver); "mixed",
// the same with every 8th frame a pure ACK of another flow (both
// directions busy); "acks", 64 pure ACKs of one flow (a sender).
func BenchmarkRxGROBatch(b *testing.B) {
	const mss = 1448
	for _, v6 := range []bool{false, true} {
		for _, kind := range []string{"data", "mixed", "acks"} {
			b.Run(fmt.Sprintf("%s/v6=%v", kind, v6), func(b *testing.B) {
				e, err := New(Options{Device: &fullDevice{}, GRO: true})
				if err != nil {
					b.Fatal(err)
				}
				d := &countDispatcher{}
				e.groOut.d = d
				e.gro.Dispatcher = &e.groOut
				var frames []benchFrame
				var data []int // indices of data segments, in order
				for i := 0; i < 64; i++ {
					if kind == "acks" || kind == "mixed" && i%8 == 7 {
						frames = append(frames, benchSeg(v6, 2, 7, 0))
						continue
					}
					data = append(data, i)
					frames = append(frames, benchSeg(v6, 1, 0, mss))
				}
				seq := uint32(1)
				addr := tcpip.LinkAddress([]byte{2, 0, 0, 0, 0, 1})
				b.SetBytes(int64(len(data) * mss))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, k := range data { // the stream goes on in order
						binary.BigEndian.PutUint32(frames[k][len(frames[k])-mss-20+4:], seq)
						seq += mss
					}
					for _, f := range frames {
						e.deliver(d, f, addr)
					}
					e.flushGRO()
				}
			})
		}
	}
}
