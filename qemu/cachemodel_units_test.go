package qemu

import (
	"math"
	"testing"
)

// TestCacheModelDRAMWritePerLine checks DRAMWrite in the unit of its
// source: 7-cpu.com's Cortex-A9 page measures "RAM Read B/W (Parallel
// Random Read) = 68 ns / cache line = 470 MB/s" on the Exynos 4210, whose
// line is 32 bytes (the page's "L1 Data cache = 32 KB. 4-WAY, 32 B/line").
// The model charges DRAMWrite per line of the SoC's own L2 (cachemodel.c:
// dram_write counts L2 lines), so a 64-byte line (Cortex-A7) moves twice
// the bytes of the measured one and costs 136 ns at that bandwidth.
func TestCacheModelDRAMWritePerLine(t *testing.T) {
	const nsPer32B = 68.0
	for key, soc := range CacheSoCs {
		k, ok := SoCCosts[key]
		if !ok {
			t.Errorf("%s: no cost constants", key)
			continue
		}
		want := nsPer32B * float64(soc.L2.Line) / 32 * k.MHz / 1000
		if math.Abs(k.DRAMWrite-want) > 1e-9*want {
			t.Errorf("%s: DRAMWrite %.2f cycles per %d-byte line, want %.2f (68 ns per 32 bytes at %.0f MHz)",
				key, k.DRAMWrite, soc.L2.Line, want, k.MHz)
		}
	}
}
