//go:build tamago && arm

package main

import (
	"fmt"
	"unsafe"

	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tee/teemap"
	"github.com/tamanic/tamanic/tee/tzplan"
)

// Debug, set with -ldflags "-X main.Debug=1", keeps JTAG (ARM invasive
// debug and its clock) on for development; without it the partition
// turns debug off and locks it off.
var Debug string

// partition sets up what TrustZone enforces (package tee/tzplan has the
// values and why): the Normal World gets the VFP (CP10, CP11: Go uses
// it); its memory is Non-secure and execute-never in the Secure World's
// page table (so SCR.SIF aside, no Secure fetch can land there); every
// interrupt is Group 1 but the Secure World's (ENET1's line and the
// Secure physical timer), and the Secure World does not take the
// Non-secure timer's PPI; on silicon the CSU, the TZASC and the IOMUXC
// GPR bits are programmed and locked (tzplan.Apply). It runs after the
// Normal World is loaded (monitor.Load opens its TZASC region, which the
// lockdown then freezes). QEMU models neither the CSU nor the TZASC
// (imx6ul.Native is false there): those are not programmed under QEMU;
// the page table, the GIC and the SCR are.
func partition() error {
	imx6ul.ARM.NonSecureAccessControl(1<<11 | 1<<10)
	if err := checkNormalXN(); err != nil {
		return err
	}
	fmt.Println("tee: Normal World memory: Non-secure, execute-never in the Secure page table")
	writeSCR(tzplan.SCRSecure)
	if readSCR()&tzplan.SCRSIF == 0 {
		return fmt.Errorf("tee: SCR %#x: SIF did not stick", readSCR())
	}
	groupInterrupts()
	if !imx6ul.Native {
		fmt.Println("tee: emulated: CSU and TZASC not programmed (QEMU enforces neither)")
		return nil
	}
	c := tzplan.Config{NormalStart: teemap.NormalStart, NormalSize: teemap.NormalSize, Debug: Debug != ""}
	if err := tzplan.Apply(mmio.Block{}, c); err != nil {
		return err
	}
	dbg := "JTAG off and locked"
	if c.Debug {
		dbg = "JTAG left on (Debug build)"
	}
	fmt.Printf("tee: CSU and TZASC programmed and locked (every master Non-secure but CPU and ENET; DDR Secure-only but the Normal World's region; OCRAM Secure); %s\n", dbg)
	return nil
}

// groupInterrupts makes every interrupt Group 1 but the Secure World's,
// and disables the Non-secure physical timer's PPI in the distributor
// (the Normal World may enable its own Group 1 interrupts).
func groupInterrupts() {
	var b mmio.Block
	lines := int(b.Read32(tzplan.GICBase+0x1000+0x004)&0x1f) + 1 // GICD_TYPER.ITLinesNumber
	for i, g := range tzplan.GICGroups(lines, tzplan.PPISecurePhysTimer, imx6ul.ENET1_IRQ) {
		b.Write32(tzplan.GICD_IGROUPR+4*uint32(i), g)
	}
	b.Write32(tzplan.GICD_ICENABLER, 1<<tzplan.PPINonSecurePhysTimer)
	fmt.Printf("tee: GIC: %d interrupt lines Group 1 (Non-secure) but PPI %d and IRQ %d; IGROUPR0 %#08x\n",
		32*lines, tzplan.PPISecurePhysTimer, imx6ul.ENET1_IRQ, b.Read32(tzplan.GICD_IGROUPR))
}

// checkNormalXN reads back the Secure World's first-level page table
// (TamaGo's, at the start of its RAM plus 16 KiB) over the Normal
// World's memory: every 1 MiB section must be Non-secure and
// execute-never.
func checkNormalXN() error {
	l1 := uint32(teemap.SecureStart + 0x4000)
	for a := uint32(teemap.NormalStart); a < teemap.NormalStart+teemap.NormalSize; a += 1 << 20 {
		e := *(*uint32)(unsafe.Add(nil, uintptr(l1+4*(a>>20))))
		if e&arm.TTE_SECTION == 0 || e&arm.TTE_NS == 0 || e&arm.TTE_EXECUTE_NEVER == 0 {
			return fmt.Errorf("tee: Secure page table entry for %#x is %#x: not a Non-secure execute-never section", a, e)
		}
	}
	return nil
}
