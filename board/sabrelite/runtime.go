//go:build tamago && arm

package sabrelite

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	_ "unsafe"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/soc/nxp/uart"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// TamaGo has no i.MX6Q support: this file provides the runtime hooks of
// runtime/goos that a TamaGo SoC package provides elsewhere (memory
// layout, time, console, randomness, early hardware initialisation).

//go:linkname ramStart runtime/goos.RamStart
var ramStart uint32 = RAMStart

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = GoRAMSize

//go:linkname ramStackOffset runtime/goos.RamStackOffset
var ramStackOffset uint32 = 0x100

// ARM is core 0, a Cortex-A9 (QEMU starts the other cores powered off,
// the boot ROM holds them on silicon).
var ARM = &arm.CPU{}

// UART2 is the console, the SABRE Lite's DB9 (i.MX6DQ RM: UART2 at
// 0x021E_8000; clock gate CCM_CCGR5 CG13 uart_serial_clk, 80 MHz from
// PLL3/6 after the boot ROM).
var UART2 = &uart.UART{
	Index: 2,
	Base:  UART2Base,
	CCGR:  CCMBase + CCM_CCGR5,
	CG:    26, // CG13 occupies bits 27:26
	Clock: func() uint32 { return 80_000_000 },
}

// Timer is the global timer, the board's clock; set up by hwinit1.
var Timer *GlobalTimer

// l2On records whether EnableL2 found and enabled a PL310.
var (
	l2On  bool
	l2Err error
)

//go:linkname nanotime runtime/goos.Nanotime
func nanotime() int64 {
	if Timer == nil {
		return 1
	}
	return Timer.Now() + 1
}

//go:linkname printk runtime/goos.Printk
func printk(c byte) { UART2.Tx(c) }

// rng is a ChaCha8 stream seeded from the global timer. It is NOT a
// cryptographic source on silicon (the boot time is guessable): the CAAM
// TRNG is not driven yet. It serves gVisor's sequence numbers and ports.
var rng *rand.ChaCha8

//go:linkname initRNG runtime/goos.InitRNG
func initRNG() {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(nanotime()))
	copy(seed[16:], "tamanic-sabrelite")
	rng = rand.NewChaCha8(seed)
}

//go:linkname getRandomData runtime/goos.GetRandomData
func getRandomData(b []byte) {
	if rng == nil {
		initRNG()
	}
	_, _ = rng.Read(b)
}

//go:linkname hwinit1 runtime/goos.Hwinit1
func hwinit1() {
	if ARM.Mode() == arm.SYS_MODE {
		start, _ := runtime.MemRegion()
		ARM.Init(start)
		ARM.EnableSMP() // ACTLR.SMP, bit 6 on the A9 as on the A7
		ARM.InitMMU()
		ARM.EnableCache()
		remapDMA(uintptr(start))
		// The L2 comes on after L1 and the MMU: RAM is mapped outer
		// write-back by then, and the L2 is invalidated while still off.
		l2On, l2Err = EnableL2(mmio.Block{Base: PL310Base}, 1<<20)
	}
	Timer = NewGlobalTimer(mmio.Block{Base: GlobalTimerBase}, GlobalTimerHz(), ARM.WaitInterrupt)
	UART2.Init()
}

// TamaGo's translation tables: L1 at vbar+0x4000 (4096 entries), then two
// 256-entry L2 tables at 0xc000 and 0xc400 (tamago arm/mmu.go); vbar is
// the start of the runtime's RAM, as hwinit1 passes it to ARM.Init.
const (
	ttStart = 0x4000
	ttEnd   = 0xc800
)

// remapDMA maps the DMA region but its first MiB as normal write-back
// memory (see Memory). It runs in hwinit1, before EnableL2 turns the PL310
// on: ConfigureMMU cleans the new entries from L1 by set/way, which does not
// reach a PL310 (outside the A9's cache levels), and the table walker reads
// memory uncached (TTBR0 IRGN and RGN 0), so with the L2 on an entry could
// stay in it, unseen by the walker. When a boot loader left the PL310 on,
// the tables' lines are cleaned from it by address (tables are identity
// mapped), then the TLBs flushed again. Then DSB and ISB, which TamaGo's
// TLB flush does not issue after it.
func remapDMA(vbar uintptr) {
	ARM.ConfigureMMU(DMAStart+CoherentSize, DMAStart+DMASize, 0, arm.MemoryRegion|arm.TTE_EXECUTE_NEVER)
	if l2 := (mmio.Block{Base: PL310Base}); l2.Read32(L2_CACHE_ID) != 0 && l2.Read32(L2_CTRL)&L2_CTRL_EN != 0 {
		p := dma.PL310{Regs: l2}
		p.Clean(vbar+ttStart, ttEnd-ttStart)
		_ = p.Sync() // line operations are atomic on the L2C-310: the sync only drains
		ARM.FlushTLBs()
	}
	dma.TranslationBarrier()
}
