//go:build tamago && arm

// Command mx6ullevk-tee is the Trusted OS of the TrustZone-partitioned
// tamanic firmware for the MCIMX6ULL-EVK and QEMU's mcimx6ul-evk. It runs
// in the Secure World, owns ENET1 (its registers, its bus-master access,
// its descriptor rings and buffers) and runs the ENET driver (package fec,
// software TSO) there; it loads the Normal World OS (./normal, embedded as
// assets/normal.elf) with GoTEE's monitor package and serves its world
// calls (package tee/netcall) until it stops. The memory map is package
// tee/teemap's; what TrustZone enforces is package tee/tzplan's
// (partition.go); around each world switch the exception modes' banked
// registers, the SCR and the GIC's Group 1 signalling are swapped
// (world.go).
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
	ctx, err := loadNormalWorld(image)
	if err != nil {
		halt(err)
	}
	if err := partition(); err != nil {
		halt(err)
	}
	w := &worlds{}
	ctx.Handler = func(ctx *monitor.ExecCtx) error {
		w.toSecure()
		return handle(ctx, srv, w)
	}
	// IRQs are the Secure World's: the Trusted OS's Go code runs with
	// them masked once the Normal World has made its first call (GoTEE's
	// monitor vector masks them), and unmasks them
	// only while it waits for the NIC (OpWait). They must be masked again
	// before each world switch: GoTEE's Schedule installs the monitor's
	// vector table (TamaGo's Secure VBAR too) before it calls MMU and
	// Exec, and an IRQ taken there would enter the monitor's handler on
	// the Secure World's state. worldloop.Run masks them as the last step
	// before every Schedule (GoTEE's Run yields between switches, where
	// the interrupt service goroutine may unmask them); toNormal masks
	// them again and swaps the banked registers (worlds).
	ctx.MMU = w.toNormal
	fmt.Printf("tee: starting the Normal World at %#x\n", ctx.R15)
	err = run(ctx, w)
	w.toSecure()
	fmt.Printf("tee: the Normal World stopped: %v\n%s\n", err, ctx)
	st := srv.Stats()
	fmt.Printf("tee: %d world calls, refused %v\n", st.Calls, st.Refused)
	halt(fmt.Errorf("Normal World stopped"))
}

// handle serves one exception of the Normal World: its world calls (SMC),
// GoTEE's write and exit calls; an abort stops it. The caller has made
// the core the Secure World's again (worlds.toSecure).
func handle(ctx *monitor.ExecCtx, srv *netcall.Server, w *worlds) error {
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
		w.stopped = true
	case uint32(netcall.OpWait):
		// The NIC's interrupt ends the wait: let it in, on the Trusted
		// OS's own IRQ stack (toSecure put it back; checked anyway).
		if w.irqStackIsSecure() {
			imx6ul.ARM.EnableInterrupts(false)
		} else if w.foreign == 1 {
			fmt.Println("tee: the IRQ stack is not the Trusted OS's: OpWait runs with IRQs masked")
		}
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
	// Never executable from the Secure World (Load maps it without XN).
	imx6ul.ARM.SetAttributes(uint32(mem.Start()), uint32(mem.End()), arm.MemoryRegion|arm.TTE_NS|arm.TTE_EXECUTE_NEVER)
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

func halt(err error) {
	fmt.Printf("tee: PANIC %v\n", err)
	os.Exit(1)
}

// at is the memory at physical address a (the Trusted OS's mapping is
// flat).
func at(a uint64, n uint64) []byte { return unsafe.Slice((*byte)(unsafe.Add(nil, uintptr(a))), n) }
