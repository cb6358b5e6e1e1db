//go:build linux

package netstack_test

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTCPBulk sends 16 MiB over TCP/IPv4 per op from one stack to the
// other through endpoint, driver, ENET model, wire, model, driver, endpoint.
// CPU time is the whole process (both stacks and both models), from
// getrusage.
func BenchmarkTCPBulk(b *testing.B) {
	const mib = 16
	for _, m := range []mode{
		modes[0], {"bounce+gro", modes[0].strategy, false, true, false}, {"bounce+ackfilter", modes[0].strategy, false, false, true},
		modes[1], {"sg+gro", modes[1].strategy, false, true, false},
		modes[2], modes[3], modes[4],
	} {
		b.Run(m.name, func(b *testing.B) {
			a, c, _ := pair(b, hostOptions{mode: m, noTrace: true})
			if err := transfer(b, a, c, false, 100, 1<<20); err != nil { // warm up: ARP, windows
				b.Fatal(err)
			}
			tx0, rx0 := a.rig.NIC.Stats().Tx, a.ep.Stats()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := transfer(b, a, c, false, uint16(200+i%1000), mib<<20); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&ms1)
			tx1, rx1 := a.rig.NIC.Stats().Tx, a.ep.Stats()
			total := float64(b.N * mib)
			b.ReportMetric(float64(cpu.Nanoseconds())/total, "cpu-ns/MiB")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/total, "allocs/MiB")
			b.ReportMetric(float64(tx1.Copied-tx0.Copied)/(total*(1<<20)), "txcopied/B")
			b.ReportMetric(float64(rx1.TxPackets-rx0.TxPackets)/total, "stackpkts/MiB")
			b.ReportMetric(float64(b.N*mib*8)/b.Elapsed().Seconds(), "Mbit/s")
		})
	}
}
