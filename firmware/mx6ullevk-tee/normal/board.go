//go:build tamago && arm

package main

// The Normal World's own start-up: the runtime/goos hooks TamaGo's
// board/nxp/mx6ullevk and soc/nxp/imx6ul would otherwise provide, without
// their writes to blocks the Trusted OS closes to the Normal World (issue
// 32). Those packages, imported here, would at boot (TestTEENormalWorldCSU
// listed the writes under QEMU):
//   - set clock gates in the CCM, Normal World read-only (CSU_CSL5 slot
//     1, tee/tzplan): the OCOTP's, the watchdogs', UART1's (resetting it)
//     and the USDHCs';
//   - mux IOMUXC pads, Normal World read-only (CSL6 slot 1): the PMIC's
//     WDOG1_ANY and the USDHC write-protect pads;
//   - initialise the i.MX6ULL's RNGB and take every random byte from it
//     (imx6ul initRNG): the RNGB is Secure only (CSU_CSL34 slot 1).
//
// Here the Trusted OS has already set the clocks, pads, UART1 (the console
// both worlds write), the system counter and CNTFRQ; the Normal World
// only reads CNTFRQ, writes UART1's transmit register and takes its
// entropy from the Secure World (netcall.OpRandom, in registers).
// TestTEENormalWorldCSU (qemu) checks under QEMU that the Normal World's
// instructions make no access the CSU plan refuses.

import (
	_ "unsafe" // go:linkname

	"github.com/usbarmory/tamago/arm"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tee/netcall"
	"github.com/tamanic/tamanic/tee/smc"
	"github.com/tamanic/tamanic/tee/teemap"
)

// cpu is the Normal World's core. TimerOffset 1 keeps nanotime above 0
// before the timer is set up, as TamaGo's imx6ul.ARM does.
var cpu = &arm.CPU{TimerOffset: 1}

//go:linkname ramStart runtime/goos.RamStart
var ramStart uint32 = teemap.NormalStart

//go:linkname ramStackOffset runtime/goos.RamStackOffset
var ramStackOffset uint32 = 0x100

// hwinit1 is the runtime's early hardware set-up (goos.Hwinit1): what
// imx6ul.Init does in PL1 (exception vectors at the start of RAM, MMU,
// caches, the generic timer's rate), less the Secure-only steps: the
// ACTLR SMP bit (the Trusted OS set it; Non-secure writes need
// NSACR.NS_SMP, Cortex-A7 MPCore TRM 4.3.31) and the system counter and
// CNTFRQ writes (arm.CPU.InitGenericTimers makes them only in the Secure
// World; with a rate of 0 it reads CNTFRQ, which the Trusted OS set).
//
//go:linkname hwinit1 runtime/goos.Hwinit1
func hwinit1() {
	if cpu.Mode() != arm.SYS_MODE {
		return
	}
	cpu.Init(ramStart)
	cpu.InitMMU()
	cpu.EnableCache()
	cpu.InitGenericTimers(0, 0)
}

//go:linkname nanotime runtime/goos.Nanotime
func nanotime() int64 { return cpu.GetTime() }

// UART1, the console (IMX6ULLRM 2.2 memory map; 55.15 UART memory map):
// the transmit register and the test register's TX FIFO full flag.
const (
	uart1Base = 0x0202_0000
	uartUTXD  = 0x40
	uartUTS   = 0xb4
	utsTXFULL = 1 << 4
)

// printk writes one console character (goos.Printk) to UART1, which the
// Trusted OS has set up, waiting for room in its TX FIFO as
// uart.UART.Tx does.
//
//go:linkname printk runtime/goos.Printk
func printk(c byte) {
	u := mmio.Block{Base: uart1Base}
	for u.Read32(uartUTS)&utsTXFULL != 0 {
	}
	u.Write32(uartUTXD, uint32(c))
}

// initRNG has nothing to set up (goos.InitRNG): the entropy is the Secure
// World's.
//
//go:linkname initRNG runtime/goos.InitRNG
func initRNG() {}

// getRandomData fills b from the Secure World's random source
// (goos.GetRandomData: the runtime's seeds and crypto/rand). It runs from
// the runtime's schedinit, before hwinit1 and before the scheduler has a
// P, so it uses registers only and allocates nothing, on failure too: a
// Secure World that cannot give random bytes makes it print a fixed line
// on the console and stop the Normal World (GoTEE's exit call).
//
//go:linkname getRandomData runtime/goos.GetRandomData
func getRandomData(b []byte) {
	if err := netcall.ReadRandom(smc.Caller{}, b); err != nil {
		const msg = "normal: no entropy from the Secure World: stopping\n"
		for i := 0; i < len(msg); i++ {
			printk(msg[i])
		}
		smc.Exit(1)
	}
}
