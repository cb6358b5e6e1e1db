//go:build tamago && arm

package main

import (
	"runtime"

	"github.com/usbarmory/GoTEE/monitor"
	"github.com/usbarmory/tamago/arm"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tee/banked"
	"github.com/tamanic/tamanic/tee/teemap"
	"github.com/tamanic/tamanic/tee/tzplan"
	"github.com/tamanic/tamanic/tee/worldloop"
)

// scr is in scr_arm.s.
func readSCR() uint32
func writeSCR(v uint32)

// worlds keeps what ARMv7 shares between the worlds and GoTEE's switch
// leaves alone: the exception modes' banked registers (SP, LR, SPSR of
// IRQ, FIQ, ABT, UND and SVC, FIQ's r8-r12) and the GIC CPU interface's
// Group 1 enable. toNormal runs just before each switch into the Normal
// World (ExecCtx.MMU, IRQs masked), toSecure first thing when the core
// comes back (the handler; IRQs still masked: GoTEE's monitor vector
// masks them and nothing in between unmasks), as OP-TEE's secure monitor
// saves and restores them (sm_save_unbanked_regs,
// sm_restore_unbanked_regs). So a Secure interrupt always runs on the
// Trusted OS's own IRQ stack (TamaGo's irqHandler pushes onto SP_irq; its
// other handlers switch to the interrupted goroutine's stack), never on
// one the Normal World chose, and the Normal World finds its banked
// registers as it left them.
type worlds struct {
	secure, normal banked.Regs
	// normalGICC is the Normal World's GICC_CTLR Group 1 enable.
	normalGICC uint32
	inNormal   bool
	// stopped is set when the Normal World exits (sysExit).
	stopped bool
	// foreign counts the switches to the Secure World after which the
	// IRQ stack was not in Secure RAM (never: a check of the check).
	foreign int
}

// toNormal saves the Secure World's banked registers, loads the Normal
// World's, and gives it its Group 1 signalling back.
func (w *worlds) toNormal() {
	imx6ul.ARM.DisableInterrupts(false)
	var gicc mmio.Block
	banked.Save(&w.secure)
	banked.Load(&w.normal)
	c := gicc.Read32(tzplan.GICC_CTLR)
	gicc.Write32(tzplan.GICC_CTLR, c&^tzplan.GICCEnableGrp1|w.normalGICC)
	w.inNormal = true
}

// toSecure is toNormal's reverse, and sets the Secure World's SCR (GoTEE
// leaves 0 on the way back: SIF must be set again).
func (w *worlds) toSecure() {
	if !w.inNormal {
		return
	}
	w.inNormal = false
	writeSCR(tzplan.SCRSecure)
	var gicc mmio.Block
	banked.Save(&w.normal)
	banked.Load(&w.secure)
	c := gicc.Read32(tzplan.GICC_CTLR)
	w.normalGICC = c & tzplan.GICCEnableGrp1
	gicc.Write32(tzplan.GICC_CTLR, tzplan.SecureGICCCTLR(c))
}

// irqStackIsSecure reports whether the IRQ-mode stack the Secure World
// would use now lies in the Trusted OS's RAM (the check OpWait makes
// before it unmasks IRQs).
func (w *worlds) irqStackIsSecure() bool {
	var r banked.Regs
	banked.Save(&r)
	ok := r.IRQ.SP > teemap.SecureStart && r.IRQ.SP <= teemap.SecureStart+teemap.SecureRAMSize
	if !ok {
		w.foreign++
	}
	return ok
}

// execWorld adapts GoTEE's ExecCtx to worldloop.World.
type execWorld struct{ ctx *monitor.ExecCtx }

func (e execWorld) Schedule() error { return e.ctx.Schedule() }
func (e execWorld) Handle() error   { return e.ctx.Handler(e.ctx) }

// Resume returns to the interrupted instruction after an IRQ or FIQ, as
// GoTEE's Run does (ARM Cortex-A Series Programmer's Guide, Table 11-3).
func (e execWorld) Resume() {
	switch e.ctx.ExceptionVector {
	case arm.IRQ, arm.FIQ:
		e.ctx.R15 -= 4
	}
}

// run is GoTEE's ExecCtx.Run for the Normal World (the same access
// permissions on its memory, the same handling of exceptions) through
// worldloop.Run, which masks IRQs right before every world switch.
func run(ctx *monitor.ExecCtx, w *worlds) error {
	imx6ul.ARM.SetAccessPermissions(uint32(ctx.Memory.Start()), uint32(ctx.Memory.End()), arm.TTE_AP_001, ctx.Domain)
	return worldloop.Run(execWorld{ctx}, func() { imx6ul.ARM.DisableInterrupts(false) }, runtime.Gosched, func() bool { return w.stopped })
}
