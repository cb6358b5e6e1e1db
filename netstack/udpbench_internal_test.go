package netstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/tso"
)

// sinkDevice accepts every frame and completes what it holds when told.
type sinkDevice struct {
	done func(any, error)
	q    []any
}

func (d *sinkDevice) Info() DeviceInfo {
	return DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxFrame: 1518}
}
func (d *sinkDevice) SetTxDone(f func(any, error)) { d.done = f }
func (d *sinkDevice) Transmit(_ [][]byte, _ bool, cookie any) error {
	d.q = append(d.q, cookie)
	return nil
}
func (d *sinkDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error {
	return errors.New("unused")
}
func (d *sinkDevice) Full(error) bool          { return false }
func (d *sinkDevice) Receive() (Frame, error)  { return nil, nil }
func (d *sinkDevice) RxReady() <-chan struct{} { return nil }
func (d *sinkDevice) Poll()                    {}
func (d *sinkDevice) Close() error             { return nil }
func (d *sinkDevice) complete() {
	for _, c := range d.q {
		d.done(c, nil)
	}
	d.q = d.q[:0]
}

// udpFrame is an Ethernet frame holding one IPv4 UDP datagram of n
// payload bytes (checksums left zero).
func udpFrame(n int) []byte {
	f := make([]byte, 14+20+8+n)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(28+n))
	copy(ip[12:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	u := ip[20:]
	binary.BigEndian.PutUint16(u[0:], 1000)
	binary.BigEndian.PutUint16(u[2:], 7)
	binary.BigEndian.PutUint16(u[4:], uint16(8+n))
	return f
}

// BenchmarkUDPSmallEndpoint times the endpoint's own per-packet paths for
// one small UDP datagram, without gVisor's IP and UDP layers or a device:
// "rx", a received frame the hardware verified, as the receive loop hands
// it (deliver: parse, PacketBuffer, GRO's pass-through, the dispatcher,
// which here only counts, and the flush that ends a batch); "tx", a
// packet the stack hands WritePackets (placement into the device's
// Transmit, which only queues, and the completion that releases it).
// An op is benchBatch packets (make bench-host runs the package's
// benchmarks at -benchtime 2x); ns/packet and allocs/packet are per
// packet.
func BenchmarkUDPSmallEndpoint(b *testing.B) {
	addr := tcpip.LinkAddress([]byte{2, 0, 0, 0, 0, 2})
	for _, size := range []int{18, 64, 256, 1024} {
		b.Run(fmt.Sprintf("rx/%dB", size), func(b *testing.B) {
			e, err := New(Options{Device: &sinkDevice{}, GRO: true, AckFilter: true})
			if err != nil {
				b.Fatal(err)
			}
			d := &countDispatcher{}
			e.groOut.d = d
			e.gro.Dispatcher = &e.groOut
			// Boxed once: a benchFrame (a slice) put in the Frame interface
			// is an allocation of the benchmark's, not the endpoint's.
			var f Frame = benchFrame(udpFrame(size))
			perPacket(b, func() {
				e.deliver(d, f, addr)
				e.flushGRO()
			})
			if d.n != b.N*benchBatch+100 {
				b.Fatalf("%d of %d datagrams handed up", d.n, b.N*benchBatch+100)
			}
		})
		b.Run(fmt.Sprintf("tx/%dB", size), func(b *testing.B) {
			dev := &sinkDevice{}
			e, err := New(Options{Device: dev, GRO: true, AckFilter: true})
			if err != nil {
				b.Fatal(err)
			}
			p := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(udpFrame(size))})
			defer p.DecRef()
			var l stack.PacketBufferList
			l.PushBack(p)
			perPacket(b, func() {
				if n, err := e.WritePackets(l); err != nil || n != 1 {
					b.Fatalf("WritePackets: %d, %v", n, err)
				}
				dev.complete()
			})
		})
	}
}

// benchBatch is the packets per op of the per-packet benchmarks.
const benchBatch = 1000

// perPacket runs f 100 times (pools, first-use paths), then benchBatch
// times per op, and reports ns/packet and allocs/packet.
func perPacket(b *testing.B, f func()) {
	for range 100 {
		f()
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for b.Loop() {
		for range benchBatch {
			f()
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	n := float64(b.N * benchBatch)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/packet")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/packet")
}
