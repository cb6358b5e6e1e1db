//go:build tamago && arm

package mcimx7d

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	_ "unsafe"

	"github.com/tamanic/tamanic/board/internal/tickless"
	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/soc/nxp/uart"
)

// TamaGo has no i.MX7D support: this file provides the runtime hooks of
// runtime/goos that a TamaGo SoC package provides elsewhere (memory
// layout, time, console, randomness, early hardware initialisation).

//go:linkname ramStart runtime/goos.RamStart
var ramStart uint32 = RAMStart

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = GoRAMSize

//go:linkname ramStackOffset runtime/goos.RamStackOffset
var ramStackOffset uint32 = 0x100

// ARM is the Cortex-A7 core the runtime runs on (core 0; QEMU starts core
// 1 powered off, the boot ROM holds it on silicon).
var ARM = &arm.CPU{
	// required before Init (TamaGo)
	TimerOffset: 1,
}

// UART1 is the console (i.MX 7Dual RM, UART1 at 0x3086_0000; clock gate
// CCM_CCGR148, root clock from the 24 MHz oscillator after reset).
var UART1 = &uart.UART{
	Index: 1,
	Base:  UART1Base,
	CCGR:  CCMBase + 0x4000 + 148*0x10,
	CG:    0,
	Clock: func() uint32 { return 24_000_000 },
}

// nanotime is TamaGo's ARM.GetTime in integer arithmetic
// (tickless.Nanotime: the float64 conversion costs a software routine per
// reading on GOARM=7).
//
//go:linkname nanotime runtime/goos.Nanotime
func nanotime() int64 { return tickless.Nanotime(ARM) }

//go:linkname printk runtime/goos.Printk
func printk(c byte) { UART1.Tx(c) }

// rng is a ChaCha8 stream seeded from the generic timer's counter. It is
// NOT a cryptographic source on silicon (the boot time is guessable): the
// CAAM TRNG is not driven yet. It serves gVisor's sequence numbers and
// ports under QEMU.
var rng *rand.ChaCha8

//go:linkname initRNG runtime/goos.InitRNG
func initRNG() {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], ARM.Counter())
	binary.LittleEndian.PutUint64(seed[8:], uint64(ARM.GetTime()))
	copy(seed[16:], "tamanic-mcimx7d-")
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
		ARM.EnableSMP()
		ARM.InitMMU()
		ARM.EnableCache()
		// The boot loader (U-Boot: 8 MHz) or QEMU (62.5 MHz) sets
		// CNTFRQ; when nothing did, start the system counter at the
		// i.MX7D's 8 MHz.
		ARM.InitGenericTimers(0, 0)
		if ARM.TimerMultiplier == 0 || ARM.TimerMultiplier > 1e9 {
			ARM.InitGenericTimers(SysCntCtrlBase, 8_000_000)
		}
	}
	UART1.Init()
}
