//go:build linux

package netstack_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// BenchmarkUDPSmallRR sends small UDP datagrams back and forth between two
// stacks, one outstanding (UDP_RR): each datagram goes through the
// sender's endpoint TX path (placement, driver, ENET model), the wire, and
// the receiver's RX path (model, driver, copybreak or zero-copy hand-off,
// endpoint, gVisor's IPv4 and UDP input) to its socket, and is echoed. Per
// packet (two per transaction): wall and CPU ns (getrusage) and heap
// allocations, the whole process (both stacks, both models, the sockets
// and their goroutines' hand-offs), in the firmware's mode
// (sg+tso+gro+ackfilter), with the RX copybreak at its default (512: the
// frames of all but the 1024-byte datagrams are copied) and off (zero-copy
// hand-off of the ring buffer). BenchmarkUDPSmallEndpoint times the
// endpoint's part alone.
//
// An op is rrBatch transactions (make bench-host runs the package's
// benchmarks at -benchtime 2x).
func BenchmarkUDPSmallRR(b *testing.B) {
	const rrBatch = 500
	for _, cb := range []int{512, -1} {
		for _, size := range []int{18, 64, 256, 1024} {
			b.Run(fmt.Sprintf("copybreak=%d/%dB", cb, size), func(b *testing.B) {
				a, c, _ := pair(b, hostOptions{mode: modes[5], noTrace: true})
				a.rig.NIC.SetCopybreak(cb)
				c.rig.NIC.SetCopybreak(cb)
				srv, err := gonet.DialUDP(c.s, &tcpip.FullAddress{NIC: 1, Addr: c.v4, Port: 7}, nil, ipv4.ProtocolNumber)
				if err != nil {
					b.Fatal(err)
				}
				defer srv.Close()
				go func() {
					buf := make([]byte, 2048)
					for {
						n, from, err := srv.ReadFrom(buf)
						if err != nil {
							return
						}
						srv.WriteTo(buf[:n], from)
					}
				}()
				cl, err := gonet.DialUDP(a.s, &tcpip.FullAddress{NIC: 1, Addr: a.v4}, &tcpip.FullAddress{NIC: 1, Addr: c.v4, Port: 7}, ipv4.ProtocolNumber)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				req, resp := bytes.Repeat([]byte{0xa5}, size), make([]byte, 2048)
				rr := func() {
					if _, err := cl.Write(req); err != nil {
						b.Fatal(err)
					}
					cl.SetReadDeadline(time.Now().Add(5 * time.Second))
					if n, err := cl.Read(resp); err != nil || n != size {
						b.Fatalf("echo: %d bytes, %v", n, err)
					}
				}
				for range 100 { // ARP, pools
					rr()
				}
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					for range rrBatch {
						rr()
					}
				}
				b.StopTimer()
				cpu := cpuTime() - cpu0
				runtime.ReadMemStats(&ms1)
				pkts := float64(2 * b.N * rrBatch)
				b.ReportMetric(float64(cpu.Nanoseconds())/pkts, "cpu-ns/packet")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pkts, "ns/packet")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/pkts, "allocs/packet")
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/pkts, "B/packet")
			})
		}
	}
}
