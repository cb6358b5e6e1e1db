//go:build tamago && arm

package main

import (
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tee/banked"
	"github.com/tamanic/tamanic/tee/netcall"
	"github.com/tamanic/tamanic/tee/tzplan"
)

// canary is the memory the probe points its IRQ-mode SP into: a Secure
// World that took an interrupt on that stack would write its registers
// here.
var canary [4096]byte

const canaryByte = 0xC5

// probeBanked is the hostile image's check of the world switch (issue 32
// item 1): it sets its own exception-mode banked registers to probe
// values, SP_irq in the middle of canary, makes waits (OpWait: the Secure
// World unmasks its IRQs and takes at least its timer's interrupt in
// each), and reports how many canary bytes changed and which banked
// registers differ from what it set; then it puts its own back. It runs
// with IRQs masked, as the Normal World always does.
func probeBanked(dev *netcall.Device, waits int) (touched int, changed string) {
	for i := range canary {
		canary[i] = canaryByte
	}
	var own, probe, after banked.Regs
	banked.Save(&own)
	sp := uint32(uintptr(unsafe.Pointer(&canary[len(canary)/2])))
	probe = banked.Regs{
		IRQ:   banked.Mode{SP: sp, LR: 0x11111110, SPSR: 0x800001d2},
		FIQ:   banked.Mode{SP: sp - 256, LR: 0x22222220, SPSR: 0x400001d1},
		ABT:   banked.Mode{SP: sp - 512, LR: 0x33333330, SPSR: 0x200001d7},
		UND:   banked.Mode{SP: sp - 768, LR: 0x44444440, SPSR: 0x100001db},
		SVC:   banked.Mode{SP: sp - 1024, LR: 0x55555550, SPSR: 0x000001d3},
		FIQR8: [5]uint32{0xf8f8f8f8, 0xf9f9f9f9, 0xfafafafa, 0xfbfbfbfb, 0xfcfcfcfc},
	}
	banked.Load(&probe)
	for range waits {
		dev.Wait(2 * time.Millisecond)
	}
	banked.Save(&after)
	banked.Load(&own)
	for _, b := range canary {
		if b != canaryByte {
			touched++
		}
	}
	var diff []string
	for _, m := range []struct {
		name      string
		got, want banked.Mode
	}{{"irq", after.IRQ, probe.IRQ}, {"fiq", after.FIQ, probe.FIQ}, {"abt", after.ABT, probe.ABT},
		{"und", after.UND, probe.UND}, {"svc", after.SVC, probe.SVC}} {
		if m.got != m.want {
			diff = append(diff, fmt.Sprintf("%s:%08x/%08x/%08x", m.name, m.got.SP, m.got.LR, m.got.SPSR))
		}
	}
	if after.FIQR8 != probe.FIQR8 {
		diff = append(diff, fmt.Sprintf("fiq_r8-r12:%08x", after.FIQR8))
	}
	if len(diff) == 0 {
		return touched, "none"
	}
	return touched, strings.Join(diff, ",")
}

// probeGroups is the hostile image's check of the GIC groups (issue 32
// item 4), from the only view the Normal World has: a Non-secure access
// to a Group 0 interrupt's enable bit reads as zero and ignores writes
// (GICv2, ARM IHI 0048B 4.3.5, 4.3.6), one to a Group 1 interrupt's
// works. It enables its own physical timer's PPI 30, reads the bit back
// and disables it again, and reads ENET1's (IRQ 150, enabled by the
// Secure World): "ppi30=1 enet1=0" means PPI 30 is the Normal World's and
// ENET1 the Secure World's.
func probeGroups() (ppi30, enet1 uint32) {
	gicd := mmio.Block{Base: tzplan.GICBase + 0x1000}
	const isenabler, icenabler = 0x100, 0x180
	gicd.Write32(isenabler, 1<<tzplan.PPINonSecurePhysTimer)
	ppi30 = gicd.Read32(isenabler) >> tzplan.PPINonSecurePhysTimer & 1
	gicd.Write32(icenabler, 1<<tzplan.PPINonSecurePhysTimer)
	const irq = 150
	enet1 = gicd.Read32(isenabler+4*(irq/32)) >> (irq % 32) & 1
	return ppi30, enet1
}

// probeStorm is the hostile image's check that the Normal World's timer
// cannot stall the Secure World (issue 32 item 4): it enables its
// physical timer's PPI 30 and its CPU interface's Group 1 signalling,
// fires the timer and leaves it asserted (its own IRQs stay masked, so
// only the Secure World could take it), and makes waits; with PPI 30 in
// the Secure World's group, each wait's interrupt handling would take
// PPI 30 again and again. It returns the waits that came back, then
// stops the timer and puts the GIC back.
func probeStorm(dev *netcall.Device, waits int) int {
	gicd := mmio.Block{Base: tzplan.GICBase + 0x1000}
	gicc := mmio.Block{Base: tzplan.GICBase + 0x2000}
	const isenabler, icenabler = 0x100, 0x180
	gicd.Write32(isenabler, 1<<tzplan.PPINonSecurePhysTimer)
	ctlr := gicc.Read32(0) // GICC_CTLR, Non-secure view: bit 0 enables Group 1
	gicc.Write32(0, ctlr|1)
	cpu.SetAlarm(1) // in the past: fires at once and stays asserted
	n := 0
	for range waits {
		dev.Wait(2 * time.Millisecond)
		n++
	}
	cpu.SetAlarm(0)
	gicd.Write32(icenabler, 1<<tzplan.PPINonSecurePhysTimer)
	gicc.Write32(0, ctlr)
	return n
}
