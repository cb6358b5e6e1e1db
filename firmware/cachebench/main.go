//go:build tamago && arm

// Command cachebench is the guest microbenchmark of the cache model
// (qemu.CachePlugin, checked by qemu's TestCacheModelCounts) for the
// MCIMX6ULL-EVK and QEMU's mcimx6ul-evk. After the board's bring-up it runs
// phases whose data-cache behaviour has an analytical answer, each between
// two calls of mark (the plugin snapshots its counters whenever mark's
// first instruction runs), then prints "READY cachebench ..." and idles:
//
//  1. copy: 512 KiB (four times the i.MX6ULL's 128 KiB L2) copied with
//     the runtime's memmove, source and destination never read before;
//  2. walk: one load per 64-byte line over 256 KiB, twice;
//  3. walk: one load per line over 64 KiB (in L2, not in L1), four times;
//  4. clean: a 16 KiB buffer read and written line by line, then cleaned
//     with dma.ARMv7Cache (DCCMVAC per line);
//  5. clean again (nothing dirty left);
//  6. invalidate [start+8, end-8) of it (partial first and last lines
//     cleaned and invalidated, the others invalidated);
//  7. the buffer read and written line by line again, then invalidated
//     whole (DCIMVAC per line) without a clean: every line holds data the
//     CPU wrote, which silicon may discard, so the plugin's
//     invalidate-address check counts each (inv_dirty).
//
// The buffers are on the Go heap: Write-Back memory in TamaGo's map.
package main

import (
	"fmt"
	"unsafe"

	"github.com/tamanic/tamanic/board/mx6ullevk"
	"github.com/tamanic/tamanic/dma"
)

// Sizes of the phases (bytes), and the line stride of the walks.
const (
	copySize  = 512 << 10
	walkBig   = 256 << 10
	walkSmall = 64 << 10
	cleanSize = 16 << 10
	stride    = 64
)

// mark is where the cache model plugin snapshots its counters.
//
//go:noinline
func mark() {}

// aligned returns n bytes of a fresh heap allocation, 4 KiB aligned.
func aligned(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) & 4095
	return b[off : off+n]
}

// walk loads one byte per stride of b, passes times.
//
//go:noinline
func walk(b []byte, passes int) uint32 {
	var s uint32
	for p := 0; p < passes; p++ {
		for i := 0; i < len(b); i += stride {
			s += uint32(b[i])
		}
	}
	return s
}

// dirty reads, then writes, one byte per line of b.
//
//go:noinline
func dirty(b []byte) uint32 {
	var s uint32
	for i := 0; i < len(b); i += stride {
		s += uint32(b[i])
	}
	for i := 0; i < len(b); i += stride {
		b[i] = byte(i >> 6)
	}
	return s
}

func main() {
	mx6ullevk.Init()
	src, dst := aligned(copySize), aligned(copySize)
	big, small, buf := aligned(walkBig), aligned(walkSmall), aligned(cleanSize)
	var cache dma.ARMv7Cache
	start := uintptr(unsafe.Pointer(&buf[0]))

	mark()
	copy(dst, src)
	mark()
	s := walk(big, 2)
	mark()
	s += walk(small, 4)
	mark()
	s += dirty(buf)
	cache.Clean(start, cleanSize)
	mark()
	cache.Clean(start, cleanSize)
	mark()
	cache.Invalidate(start+8, cleanSize-16)
	mark()
	s += dirty(buf)
	cache.Invalidate(start, cleanSize)
	mark()

	fmt.Printf("READY cachebench src=%#x dst=%#x big=%#x small=%#x buf=%#x sum=%d\n",
		uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&dst[0])), uintptr(unsafe.Pointer(&big[0])),
		uintptr(unsafe.Pointer(&small[0])), start, s+uint32(dst[0]))
	select {}
}
