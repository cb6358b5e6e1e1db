package fec_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/tso"
)

// benchLayouts: fragment lengths (0 = the rest) and misalignments mod 64,
// as in bounce's benchmarks: a flat frame and gVisor-like header + payload
// views.
var benchLayouts = []struct {
	name string
	lens []int
	mis  []int
}{
	{"flat-aligned", []int{0}, []int{0}},
	{"flat-mis2", []int{0}, []int{2}},
	{"hdr54+payload", []int{54, 0}, []int{10, 6}},
	{"hdr66+split-payload", []int{66, 700, 0}, []int{14, 3, 9}},
}

func layoutFrags(lens, mis []int, size int) [][]byte {
	var frags [][]byte
	left := size
	for i, n := range lens {
		if n == 0 || n > left || i == len(lens)-1 {
			n = left
		}
		if n == 0 {
			break
		}
		buf := make([]byte, n+128)
		o := (mis[i] - int(addrOf(buf)%64) + 128) % 64
		frags = append(frags, buf[o:o+n])
		left -= n
	}
	frags[0][12], frags[0][13] = 0x88, 0xB5
	return frags
}

func benchRig(b *testing.B, s bounce.Strategy, soc fec.SoC) *fectest.Rig {
	return fectest.NewRig(b, fectest.RigOptions{SoC: soc, NoTrace: true, NoDone: true, Config: func(c *fec.Config) {
		c.Strategy = s
		c.TxRing, c.RxRing = 256, 256
	}})
}

// BenchmarkTx measures the whole TX path per frame: placement, mapping,
// cache maintenance, descriptors, kick, model DMA and reclaim.
func BenchmarkTx(b *testing.B) {
	for _, s := range strategies {
		for _, size := range []int{64, 512, 1514} {
			for _, l := range benchLayouts {
				b.Run(fmt.Sprintf("%v/%d/%s", s, size, l.name), func(b *testing.B) {
					r := benchRig(b, s, fec.IMX6UL)
					frags := layoutFrags(l.lens, l.mis, size)
					b.ReportAllocs()
					b.SetBytes(int64(size))
					i := 0
					for b.Loop() {
						if err := r.NIC.Transmit(frags, fec.TxOptions{}, nil); err != nil {
							b.Fatal(err)
						}
						if i++; i%16 == 0 {
							r.NIC.Reclaim()
						}
					}
					st := r.NIC.Stats().Tx
					b.ReportMetric(float64(st.Copied)/float64(st.Bytes), "copied/B")
					b.ReportMetric(float64(st.Descs)/float64(st.Frames), "descs/frame")
					b.ReportMetric(float64(st.Cleaned)/float64(st.Bytes), "cleaned/B")
				})
			}
		}
	}
}

// BenchmarkRxCopybreak measures the driver's RX cost per frame (Receive and
// Release; the model fills the ring outside the timer) for frame sizes with
// copybreak off (every frame handed up zero-copy, ring refilled from a spare)
// and on (every frame copied, buffer reposted). The crossover chooses
// DefaultCopybreak.
func BenchmarkRxCopybreak(b *testing.B) {
	for _, mode := range []string{"zerocopy", "copy"} {
		for _, size := range []int{64, 128, 256, 512, 1024, 1514} {
			b.Run(fmt.Sprintf("%s/%d", mode, size), func(b *testing.B) {
				r := benchRig(b, bounce.SG, fec.IMX6UL)
				cb := -1
				if mode == "copy" {
					cb = 2048
				}
				r.NIC.SetCopybreak(cb)
				f := randomFrame(rand.New(rand.NewPCG(1, 1)), size, nicMAC)
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					b.StopTimer()
					for k := 0; k < 64; k++ {
						r.Model.Deliver(f, fectest.RxOK)
					}
					b.StartTimer()
					for k := 0; k < 64; k++ {
						p, err := r.NIC.Receive()
						if err != nil || p == nil {
							b.Fatal(err)
						}
						p.Release()
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/frame")
			})
		}
	}
}

// BenchmarkTxGSO measures software TSO of a 64 KiB TCP packet (a 54-byte
// header view and a payload split over two views, as gVisor hands it)
// through the driver and the model, against sending the same payload as
// pre-cut 1514-byte frames with each strategy.
func BenchmarkTxGSO(b *testing.B) {
	for _, soc := range []fec.SoC{fec.IMX6UL, fec.IMX7D} {
		caps, _ := fec.CapsFor(soc)
		b.Run(caps.Name, func(b *testing.B) {
			r := benchRig(b, bounce.SG, soc)
			rng := rand.New(rand.NewPCG(1, 1))
			hdr, pay := bigPacket(b, frameSpec{payload: 64000}, rng)
			vs := [][]byte{pay[:10007], pay[10007:]}
			b.ReportAllocs()
			b.SetBytes(int64(len(pay)))
			for b.Loop() {
				if err := r.NIC.TransmitGSO(hdr, vs, tso.Options{Type: tso.TCP, MSS: 1448}, nil); err != nil {
					b.Fatal(err)
				}
				r.NIC.Reclaim()
			}
			st := r.NIC.Stats().Tx
			payload := float64(st.Bytes - uint64(st.GSOSegments)*uint64(len(hdr)))
			b.ReportMetric(float64(st.Copied)/payload, "copied/payloadB")
			b.ReportMetric(float64(st.Descs)/float64(st.Frames), "descs/segment")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(st.GSOSegments), "ns/segment")
		})
	}
}
