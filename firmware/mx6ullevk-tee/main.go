//go:build tamago && arm

// Command mx6ullevk-tee is the Trusted OS of the TrustZone-partitioned
// tamanic firmware for the MCIMX6ULL-EVK and QEMU's mcimx6ul-evk. It runs
// in the Secure World, owns ENET1 (its registers, its bus-master access,
// its descriptor rings and buffers) and runs the ENET driver (package fec,
// software TSO) there; it loads the Normal World OS (./normal, embedded as
// assets/normal.elf) with GoTEE's monitor package and serves its world
// calls (package tee/netcall) until it stops. The memory map is package
// tee/teemap's.
//
// Build it with make firmware BOARD=mx6ullevk TEE=1, which builds the
// Normal World first.
package main

import (
	"bytes"
	"debug/elf"
	"embed"
	"fmt"
	"os"
	"unsafe"

	"github.com/usbarmory/GoTEE/monitor"
	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/dma"
	"github.com/usbarmory/tamago/soc/nxp/csu"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/board/mx6ullevk"
	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/tee/netcall"
	"github.com/tamanic/tamanic/tee/teemap"
)

//go:linkname ramStart runtime/goos.RamStart
var ramStart uint32 = teemap.SecureStart

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = teemap.SecureRAMSize

//go:embed assets
var assets embed.FS

// GoTEE's own monitor calls the Normal World may make (GoTEE syscall
// package: SYS_EXIT 0, SYS_WRITE 1).
const (
	sysExit  = 0
	sysWrite = 1
)

func main() {
	mx6ullevk.Init()
	fmt.Printf("tee: Trusted OS, Secure World, native=%v\n", imx6ul.Native)
	image, err := assets.ReadFile("assets/normal.elf")
	if err != nil {
		halt(fmt.Errorf("no Normal World image (build with make firmware BOARD=mx6ullevk TEE=1): %w", err))
	}
	var srv *netcall.Server
	// Scatter-gather: the staging buffers are mapped in place (fec.Config's
	// zero Strategy is bounce.Bounce, a copy of every frame).
	n, err := mx6ullevk.ENET1(fec.Config{Strategy: bounce.SG, OnTxDone: func(c any, err error) { srv.TxDone(c, err) }})
	if err != nil {
		halt(err)
	}
	region := at(teemap.TransferStart, netcall.RegionSize)
	if srv, err = netcall.NewServer(netcall.ServerConfig{NIC: n, Region: region}); err != nil {
		halt(err)
	}
	if err := partition(); err != nil {
		halt(err)
	}
	ctx, err := loadNormalWorld(image)
	if err != nil {
		halt(err)
	}
	ctx.Handler = func(ctx *monitor.ExecCtx) error { return handle(ctx, srv) }
	// IRQs are the Secure World's: the Trusted OS's Go code runs in
	// monitor mode with them masked once the Normal World has made its
	// first call (GoTEE returns there), and unmasks them only while it
	// waits for the NIC (OpWait). They must be masked again before each
	// world switch: GoTEE's Exec runs in monitor mode with the monitor's
	// vector table installed, where an IRQ would be taken for an exception
	// of the Normal World. Schedule calls MMU just before Exec.
	ctx.MMU = func() { imx6ul.ARM.DisableInterrupts(false) }
	fmt.Printf("tee: starting the Normal World at %#x\n", ctx.R15)
	err = ctx.Run()
	fmt.Printf("tee: the Normal World stopped: %v\n%s\n", err, ctx)
	st := srv.Stats()
	fmt.Printf("tee: %d world calls, refused %v\n", st.Calls, st.Refused)
	halt(fmt.Errorf("Normal World stopped"))
}

// handle serves one exception of the Normal World: its world calls (SMC),
// GoTEE's write and exit calls; an abort stops it.
func handle(ctx *monitor.ExecCtx, srv *netcall.Server) error {
	switch ctx.ExceptionVector {
	case arm.SUPERVISOR:
	case arm.IRQ, arm.FIQ:
		return nil // the Normal World runs with both masked
	default:
		return fmt.Errorf("tee: Normal World exception %d at pc %#x", ctx.ExceptionVector, ctx.R15)
	}
	switch ctx.R0 {
	case sysWrite:
		fmt.Printf("%c", byte(ctx.R1))
	case sysExit:
		ctx.Stop()
	case uint32(netcall.OpWait):
		// The NIC's interrupt ends the wait: let it in.
		imx6ul.ARM.EnableInterrupts(false)
		st, v := srv.Handle(ctx.R0, ctx.R1, ctx.R2, ctx.R3)
		imx6ul.ARM.DisableInterrupts(false)
		ctx.R0, ctx.R1 = uint32(st), v
	default:
		st, v := srv.Handle(ctx.R0, ctx.R1, ctx.R2, ctx.R3)
		ctx.R0, ctx.R1 = uint32(st), v
	}
	return nil
}

// loadNormalWorld copies the Normal World ELF's loadable segments to the
// addresses it is linked at, which must lie in the Normal World's RAM, and
// returns its execution context (Non-secure system mode).
func loadNormalWorld(image []byte) (*monitor.ExecCtx, error) {
	mem, err := dma.NewRegion(teemap.NormalStart, teemap.NormalSize, false)
	if err != nil {
		return nil, err
	}
	mem.Reserve(teemap.NormalSize, 0)
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return nil, fmt.Errorf("tee: Normal World ELF: %w", err)
	}
	if f.Machine != elf.EM_ARM || f.Class != elf.ELFCLASS32 {
		return nil, fmt.Errorf("tee: Normal World ELF for %v %v", f.Machine, f.Class)
	}
	// Load first: it maps the region Non-secure (MMU NS bit, and TZASC
	// region 1 on silicon), so the copies below land in the cache lines
	// the Normal World will see.
	ctx, err := monitor.Load(uint(f.Entry), mem, false)
	if err != nil {
		return nil, fmt.Errorf("tee: monitor.Load: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Memsz == 0 {
			continue
		}
		if p.Paddr < teemap.NormalStart || p.Paddr+p.Memsz > teemap.NormalStart+teemap.NormalRAMSize || p.Filesz > p.Memsz {
			return nil, fmt.Errorf("tee: Normal World segment %#x+%#x outside its RAM", p.Paddr, p.Memsz)
		}
		dst := at(p.Paddr, p.Memsz)
		if _, err := p.ReadAt(dst[:p.Filesz], 0); err != nil {
			return nil, fmt.Errorf("tee: Normal World segment %#x: %w", p.Paddr, err)
		}
		clear(dst[p.Filesz:])
	}
	// The Normal World starts with its MMU and caches off: it reads DRAM.
	imx6ul.ARM.FlushDataCache()
	return ctx, nil
}

// partition sets up what TrustZone enforces. The Normal World gets the
// VFP (CP10, CP11: Go uses it). On silicon: every peripheral is left
// Non-secure accessible except ENET (CSU CSL 8 slave 1, both MACs) and
// the TZASC's own registers (CSL 16 slave 1), which become Secure-only;
// the ENET bus master (CSU SA 9 on the UL/ULL) issues Secure transactions,
// so its DMA reaches the Secure-only rings and buffers; OCRAM is made
// Secure (it is outside the TZASC's reach). GoTEE's monitor already set
// TZASC region 0 (all DDR) Secure-only and monitor.Load opens region 1
// (the Normal World's 128 MiB). QEMU models neither the CSU nor the TZASC
// (imx6ul.Native is false there): nothing of this is enforced under QEMU.
func partition() error {
	imx6ul.ARM.NonSecureAccessControl(1<<11 | 1<<10)
	if !imx6ul.Native {
		fmt.Println("tee: emulated: CSU and TZASC not programmed (QEMU enforces neither)")
		return nil
	}
	for i := csu.CSL_MIN; i <= csu.CSL_MAX; i++ {
		for slave := 0; slave <= 1; slave++ {
			if err := imx6ul.CSU.SetSecurityLevel(i, slave, csu.SEC_LEVEL_0, false); err != nil {
				return fmt.Errorf("tee: CSU CSL%d: %w", i, err)
			}
		}
	}
	for _, s := range []struct{ periph, slave int }{{8, 1}, {16, 1}} {
		if err := imx6ul.CSU.SetSecurityLevel(s.periph, s.slave, csu.SEC_LEVEL_4, true); err != nil {
			return fmt.Errorf("tee: CSU CSL%d/%d: %w", s.periph, s.slave, err)
		}
	}
	if err := imx6ul.CSU.SetAccess(9, true, true); err != nil {
		return fmt.Errorf("tee: CSU SA9 (ENET): %w", err)
	}
	if err := imx6ul.SetOCRAMProtection(imx6ul.OCRAM_START); err != nil {
		return fmt.Errorf("tee: OCRAM: %w", err)
	}
	fmt.Println("tee: CSU: ENET and TZASC Secure-only, ENET master Secure; TZASC: DDR Secure-only but the Normal World's region")
	return nil
}

func halt(err error) {
	fmt.Printf("tee: PANIC %v\n", err)
	os.Exit(1)
}

// at is the memory at physical address a (the Trusted OS's mapping is
// flat).
func at(a uint64, n uint64) []byte { return unsafe.Slice((*byte)(unsafe.Add(nil, uintptr(a))), n) }
