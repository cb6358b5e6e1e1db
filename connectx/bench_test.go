package connectx_test

import (
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/tso"
)

// benchRig is a NIC whose model takes doorbells but executes them only
// when the ring is full, outside the timed region: what is measured is the
// driver's own TX path (inline header copy, mapping, WQE build, doorbell
// record, the two 32-bit UAR stores, and reclaiming completions), not the
// model's segmentation.
func benchRig(b *testing.B) *connectxtest.Rig {
	mem := dmatest.New(b, dmatest.Options{NoTrace: true, CoherentSize: 4 << 20})
	r := connectxtest.NewRig(b, connectxtest.RigOptions{Mem: mem, NoDone: true,
		Config: func(c *connectx.Config) { c.TxRing = 1024 }})
	r.NIC.SetTxDone(func(any, error) {})
	r.Model.SetFaults(connectxtest.Faults{HoldTx: true})
	return r
}

func benchSend(b *testing.B, r *connectxtest.Rig, send func() error) {
	for b.Loop() {
		err := send()
		if r.NIC.Full(err) {
			b.StopTimer()
			r.Model.ReleaseTx()
			r.Model.SetFaults(connectxtest.Faults{HoldTx: true})
			b.StartTimer()
			r.NIC.Poll()
			err = send()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	r.Model.ReleaseTx()
	r.NIC.Poll()
}

// BenchmarkTxLSO: one 64000-byte TCP payload (two views, 66-byte headers)
// handed to the card as one LSO WQE: per-packet and per-MiB driver cost.
func BenchmarkTxLSO(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		b.Run(name, func(b *testing.B) {
			r := benchRig(b)
			pay := make([]byte, 64000)
			hdr := tcpHeaders(&testing.T{}, v6, len(pay), 0x08, true)
			vs := [][]byte{pay[:10007], pay[10007:]}
			o := tso.Options{Type: tso.TCP, MSS: 1400, NeedsCsum: true, CsumOffset: 16}
			b.ReportAllocs()
			b.SetBytes(int64(len(pay)))
			benchSend(b, r, func() error { return r.NIC.TransmitGSO(hdr, vs, o, nil) })
			segs := (len(pay) + 1399) / 1400
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(segs), "ns/segment")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(1<<20)/float64(len(pay)), "ns/MiB")
		})
	}
}

// BenchmarkTxFrame: one 1514-byte frame in two views with checksum offload.
func BenchmarkTxFrame(b *testing.B) {
	r := benchRig(b)
	f := udp4(make([]byte, 1472), false)
	frags := [][]byte{f[:42], f[42:]}
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	benchSend(b, r, func() error { return r.NIC.Transmit(frags, true, nil) })
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(1<<20)/float64(len(f)), "ns/MiB")
}
