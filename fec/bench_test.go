package fec_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
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
					b.SetBytes(int64(size * rxBatch)) // an op is rxBatch frames
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

// rxBenchFrames are BenchmarkRxCopybreak's frame lengths without FCS, the
// length the driver compares with the copybreak (a UDP/IPv4 datagram's is
// its payload + 42): the shortest frame (a TCP ACK, an 18-byte datagram),
// one between each two thresholds of rxBenchCopybreaks (192, 298, 554:
// the tamanic-pps datagrams of 150, 256 and 512 bytes), 1024 (the
// longest a threshold of 1024 copies, the top of its size class) and
// 1514, a full frame.
var rxBenchFrames = []int{60, 192, 298, 554, 1024, 1514}

// rxBatch is the frames of one BenchmarkRxCopybreak op: the model
// delivers them with the timer stopped, then the driver receives and
// releases them timed. Half the 256-descriptor ring.
const rxBatch = 128

// rxBenchCopybreaks are BenchmarkRxCopybreak's thresholds; -1 is off.
var rxBenchCopybreaks = []int{128, 256, 512, 1024, -1}

// BenchmarkRxCopybreak measures, for each copybreak threshold and frame
// length, the driver's RX cost per frame (Receive and Release; the model
// fills the ring outside the timer; an op is rxBatch frames, so allocs/op
// is per rxBatch) and the memory one received frame keeps while the caller holds it
// (held-B/pkt, of which dma-B/pkt is DMA buffer), measured over the first
// 64 frames held at once on a new NIC (holdRx). docs/copybreak.md chooses
// DefaultCopybreak from these and the guest's instructions per datagram.
func BenchmarkRxCopybreak(b *testing.B) {
	for _, cb := range rxBenchCopybreaks {
		for _, size := range rxBenchFrames {
			name := fmt.Sprintf("cb=%d/frame=%d", cb, size)
			if cb < 0 {
				name = fmt.Sprintf("cb=off/frame=%d", size)
			}
			b.Run(name, func(b *testing.B) {
				var mem *allocLog
				r := fectest.NewRig(b, fectest.RigOptions{SoC: fec.IMX6UL, NoTrace: true, NoDone: true, Config: func(c *fec.Config) {
					c.Strategy = bounce.SG
					c.TxRing, c.RxRing = 256, 256
					c.Copybreak = cb
					mem = &allocLog{Memory: c.Mem}
					c.Mem = mem
				}})
				f := randomFrame(rand.New(rand.NewPCG(1, 1)), size, nicMAC)
				h := holdRx(b, r, mem, f, 64)
				b.ReportAllocs()
				b.SetBytes(int64(size * rxBatch)) // an op is rxBatch frames
				for b.Loop() {
					b.StopTimer()
					for k := 0; k < rxBatch; k++ {
						r.Model.Deliver(f, fectest.RxOK)
					}
					b.StartTimer()
					for k := 0; k < rxBatch; k++ {
						p, err := r.NIC.Receive()
						if err != nil || p == nil {
							b.Fatal(err)
						}
						p.Release()
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rxBatch), "ns/frame")
				b.ReportMetric(h.heap+h.dma, "held-B/pkt")
				b.ReportMetric(h.dma, "dma-B/pkt")
				b.ReportMetric(h.dmaAlloc, "refill-dma-B/pkt")
			})
		}
	}
}

// allocLog is a dma.Memory that records every allocation made through it.
type allocLog struct {
	dma.Memory
	bufs  [][]byte // CPU views of the allocations, in order
	bytes int      // total bytes allocated
}

// Alloc implements dma.Memory.
func (m *allocLog) Alloc(size, align int, attr dma.Attr) (dma.Buffer, error) {
	b, err := m.Memory.Alloc(size, align, attr)
	if err == nil {
		m.bufs = append(m.bufs, b.Bytes())
		m.bytes += size
	}
	return b, err
}

// footprint returns the bytes of DMA memory the allocation holding p
// takes, alignment padding included: the distance from its start to the
// start of the next allocation above it (the driver allocates its RX
// buffers one after another), or its length when none follows within
// twice that. It returns 0 when p lies in no allocation (a heap copy).
func (m *allocLog) footprint(p []byte) int {
	a := addrOf(p)
	var start uintptr
	n := 0
	for _, v := range m.bufs {
		if s := addrOf(v); s <= a && a < s+uintptr(len(v)) {
			start, n = s, len(v)
		}
	}
	if n == 0 {
		return 0
	}
	gap := uintptr(2 * n)
	for _, v := range m.bufs {
		if s := addrOf(v); s > start && s-start < gap {
			gap = s - start
		}
	}
	if gap == uintptr(2*n) {
		return n
	}
	return int(gap)
}

// held is what received frames keep while their caller holds them, per
// frame: Go heap (a copybreak copy) and DMA memory (a ring buffer handed
// up), and the DMA memory the driver allocated meanwhile to replace the
// ring buffers they took.
type held struct{ heap, dma, dmaAlloc float64 }

// holdRx receives n copies of f on r's new NIC, holds them all, measures
// what they keep and releases them. A frame's heap is the capacity of the
// buffer its Data lies in when that is no DMA allocation (mem's log): the
// pooled copy the driver made for it, from its start.
func holdRx(tb testing.TB, r *fectest.Rig, mem *allocLog, f []byte, n int) held {
	for k := 0; k < n; k++ {
		r.Model.Deliver(f, fectest.RxOK)
	}
	ps := make([]*fec.Packet, 0, n)
	dmaBefore := mem.bytes
	for k := 0; k < n; k++ {
		p, err := r.NIC.Receive()
		if err != nil || p == nil {
			tb.Fatalf("frame %d: %v", k, err)
		}
		ps = append(ps, p)
	}
	h := held{dmaAlloc: float64(mem.bytes-dmaBefore) / float64(n)}
	for _, p := range ps {
		if d := mem.footprint(p.Data); d > 0 {
			h.dma += float64(d) / float64(n)
		} else {
			// Data may start past the copy's pad; the pooled
			// buffer starts at or below it on a 64-byte boundary
			// (Go aligns its size classes of 64 to 2048 bytes to
			// their size).
			h.heap += float64(cap(p.Data)+int(addrOf(p.Data)%64)) / float64(n)
		}
		if err := p.Release(); err != nil {
			tb.Fatal(err)
		}
	}
	return h
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
