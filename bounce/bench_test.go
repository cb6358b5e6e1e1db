package bounce

import (
	"fmt"
	"testing"
)

// Layout is a frame's fragment structure for benchmarks: fragment lengths
// (the last takes the rest) and each fragment's misalignment mod 64.
type layout struct {
	name string
	lens []int
	mis  []int
}

// Layouts resembling what a stack hands a driver: a flat frame, and a
// gVisor-like prepended header view plus payload views at arbitrary offsets.
var layouts = []layout{
	{"flat-aligned", []int{0}, []int{0}},
	{"flat-mis2", []int{0}, []int{2}},
	{"hdr54+payload", []int{54, 0}, []int{10, 6}},
	{"hdr66+split-payload", []int{66, 700, 0}, []int{14, 3, 9}},
}

func makeFrags(l layout, size int) [][]byte {
	var frags [][]byte
	left := size
	for i, n := range l.lens {
		if n == 0 || n > left || i == len(l.lens)-1 {
			n = left
		}
		if n == 0 {
			break
		}
		frags = append(frags, at(make([]byte, n), l.mis[i]))
		left -= n
	}
	return frags
}

func BenchmarkPlace(b *testing.B) {
	for _, s := range []Strategy{Bounce, SG} {
		for _, size := range []int{64, 512, 1514} {
			for _, l := range layouts {
				b.Run(fmt.Sprintf("%v/%d/%s", s, size, l.name), func(b *testing.B) {
					frags := makeFrags(l, size)
					sc := newScratch(MaxSegs)
					p := &Placer{Align: 16, MaxDescs: 32}
					var plan Plan
					b.ReportAllocs()
					copied, descs := 0, 0
					for b.Loop() {
						if err := p.Place(s, frags, sc, &plan); err != nil {
							b.Fatal(err)
						}
						copied += plan.Copied
						descs += plan.N
					}
					b.ReportMetric(float64(copied)/float64(b.N*size), "copied/B")
					b.ReportMetric(float64(descs)/float64(b.N), "descs/frame")
				})
			}
		}
	}
}
