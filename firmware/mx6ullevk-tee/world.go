//go:build tamago && arm

package main

import (
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"

	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tee/banked"
	"github.com/tamanic/tamanic/tee/teemap"
	"github.com/tamanic/tamanic/tee/tzplan"
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
