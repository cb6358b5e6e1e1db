package tso

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkSegment(b *testing.B) {
	cases := []struct {
		name string
		sp   spec
		o    Options
	}{
		{"tcp4-64KiB-mss1448", spec{payload: 65536 - 54 - 12, tcpTS: true, needsCsum: true}, Options{Type: TCP, MSS: 1448, NeedsCsum: true}},
		{"tcp4-64KiB-mss536", spec{payload: 65536 - 54 - 12, tcpTS: true, needsCsum: true}, Options{Type: TCP, MSS: 536, NeedsCsum: true}},
		{"tcp6-64KiB-mss1428", spec{v6: true, payload: 65000, tcpTS: true, needsCsum: true}, Options{Type: TCP, MSS: 1428, NeedsCsum: true}},
		{"udp4-60KiB-fragments", spec{udp: true, payload: 60 << 10}, Options{Type: UDPFragment, MSS: 1480}},
		{"udp4-60KiB-gso1472", spec{udp: true, payload: 60 << 10}, Options{Type: UDPGSO, MSS: 1472}},
	}
	for _, c := range cases {
		for _, mode := range []Csum{HardwareZero, Software} {
			b.Run(fmt.Sprintf("%s/%s", c.name, map[Csum]string{HardwareZero: "hw", Software: "sw"}[mode]), func(b *testing.B) {
				hdr, pay := build(b, c.sp, rand.New(rand.NewPCG(1, 1)))
				vs := [][]byte{pay[:1000], pay[1000:]} // a header view's tail and the rest, as gVisor hands them
				o := c.o
				o.Csum = mode
				slot := make([]byte, 256)
				var s Segmenter
				var seg Segment
				segs := 0
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Init(hdr, vs, o); err != nil {
						b.Fatal(err)
					}
					for s.Next(slot, &seg) == nil {
						segs++
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(segs), "ns/segment")
				b.ReportMetric(float64(segs)/float64(b.N), "segments/op")
			})
		}
	}
}
