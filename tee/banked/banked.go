// Package banked saves and loads the ARMv7-A banked registers of the
// exception modes: SP, LR and SPSR of IRQ, FIQ, abort, undefined and
// supervisor mode, and FIQ mode's own r8-r12.
//
// On a core with the Security Extensions these registers are banked per
// mode but not per world: only monitor mode's are the Secure World's
// alone (ARM Architecture Reference Manual ARMv7-A/R, B1.3.2 "ARM core
// registers", B1.5 "Security Extensions"). The User/System registers are
// shared too, and GoTEE's world switch saves them (r0-r15, CPSR); the
// exception modes' are this package's. A Trusted OS that lets the Normal
// World run must therefore, like OP-TEE's secure monitor
// (core/arch/arm/sm/sm_a32.S, sm_save_unbanked_regs and
// sm_restore_unbanked_regs), save the Normal World's set when it takes
// the core back and load its own before it takes an exception, and the
// reverse before it returns: otherwise a Secure interrupt runs on the
// stack the Normal World last put in SP_irq.
//
// Save and Load are for TamaGo on ARM (GOOS=tamago GOARCH=arm) and must
// run in a PL1 mode other than the ones they switch through (TamaGo runs
// in System mode); they mask IRQs and FIQs while they do and restore the
// caller's mask.
package banked

// Mode is one exception mode's banked SP, LR and SPSR.
type Mode struct {
	SP, LR, SPSR uint32
}

// Regs is a world's set of exception-mode banked registers. The layout is
// the assembly's (banked_arm.s): each Mode is 12 bytes, in the order IRQ,
// FIQ, ABT, UND, SVC, then FIQ's r8-r12.
type Regs struct {
	IRQ, FIQ, ABT, UND, SVC Mode
	// FIQR8 is FIQ mode's r8-r12.
	FIQR8 [5]uint32
}

// Byte offsets of the fields in Regs, as the assembly uses them.
const (
	offIRQ   = 0
	offFIQ   = 12
	offABT   = 24
	offUND   = 36
	offSVC   = 48
	offFIQR8 = 60
	size     = 80
)
