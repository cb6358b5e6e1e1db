//go:build tamago && arm

#include "textflag.h"

// Mode switches use MSR CPSR_c with an immediate (mode, I and F set, T
// clear), as TamaGo's own set_exc_stack does; the caller's mode and mask
// are kept in R2 and restored with MSR CPSR_c, R2 (0xe121f002). Nothing
// here touches memory through SP while in another mode: only R0-R3 and
// the mode's own banked registers. In FIQ mode r8-r12 are FIQ's own, so
// the STM/LDM of r8-r12 there moves FIQ's set and leaves the caller's
// (including Go's g, R10) alone.

#define SAVE_MODE(CPSRC, OFF) \
	WORD	CPSRC \
	MOVW	R13, OFF+0(R0) \
	MOVW	R14, OFF+4(R0) \
	WORD	$0xe14f1000 /* mrs r1, SPSR */ \
	MOVW	R1, OFF+8(R0)

#define LOAD_MODE(CPSRC, OFF) \
	WORD	CPSRC \
	MOVW	OFF+0(R0), R13 \
	MOVW	OFF+4(R0), R14 \
	MOVW	OFF+8(R0), R1 \
	WORD	$0xe16ff001 /* msr SPSR_fsxc, r1 */

// func Save(r *Regs)
TEXT ·Save(SB),NOSPLIT,$0-4
	MOVW	r+0(FP), R0
	WORD	$0xe10f2000 // mrs r2, CPSR
	SAVE_MODE($0xe321f0d2, 0)  // IRQ
	SAVE_MODE($0xe321f0d1, 12) // FIQ
	ADD	$60, R0, R3
	WORD	$0xe8831f00 // stmia r3, {r8-r12} (FIQ's)
	SAVE_MODE($0xe321f0d7, 24) // ABT
	SAVE_MODE($0xe321f0db, 36) // UND
	SAVE_MODE($0xe321f0d3, 48) // SVC
	WORD	$0xe121f002 // msr CPSR_c, r2
	RET

// func Load(r *Regs)
TEXT ·Load(SB),NOSPLIT,$0-4
	MOVW	r+0(FP), R0
	WORD	$0xe10f2000 // mrs r2, CPSR
	LOAD_MODE($0xe321f0d2, 0)  // IRQ
	LOAD_MODE($0xe321f0d1, 12) // FIQ
	ADD	$60, R0, R3
	WORD	$0xe8931f00 // ldmia r3, {r8-r12} (FIQ's)
	LOAD_MODE($0xe321f0d7, 24) // ABT
	LOAD_MODE($0xe321f0db, 36) // UND
	LOAD_MODE($0xe321f0d3, 48) // SVC
	WORD	$0xe121f002 // msr CPSR_c, r2
	RET
