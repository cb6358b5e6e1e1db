//go:build tamago && arm && linkcpuinit

#include "textflag.h"

// cpuinit is the reset entry point (goos.CPUInit jumps here). See the
// package comment for what it does and why.
TEXT cpuinit(SB),NOSPLIT|NOFRAME,$0
	BL	·zeroBSS(SB)

	// The initial stack: RamStackOffset bytes below the end of the
	// runtime's RAM (goos.RamStart + goos.RamSize).
	MOVW	runtime∕goos·RamStart(SB), R4
	MOVW	runtime∕goos·RamSize(SB), R5
	MOVW	runtime∕goos·RamStackOffset(SB), R6
	ADD	R5, R4, R4
	SUB	R6, R4, R4
	MOVW	R4, R13

	// The current mode, CPSR.M (ARM ARM B1.3.1).
	WORD	$0xe10f0000	// mrs r0, cpsr
	AND	$0x1f, R0, R1
	CMP	$0x10, R1	// User: no privileged set-up to do
	B.EQ	run
	CMP	$0x1a, R1	// Hyp: leave it for SVC, A/I/F masked
	B.EQ	hyp
	B	·systemMode(SB)
hyp:
	BIC	$0x1f, R0, R0
	ORR	$0x1d3, R0, R0
	MOVW	$·systemMode(SB), R14
	WORD	$0xe16ff000	// msr spsr_fsxc, r0
	WORD	$0xe12ef30e	// msr elr_hyp, lr
	WORD	$0xe160006e	// eret
run:
	B	_rt0_tamago_start(SB)

// systemMode enters System mode with IRQ and FIQ masked, sets the stack
// pointer (banked per mode: the one set above was the previous mode's)
// and starts the runtime. R4 holds the stack pointer.
TEXT ·systemMode(SB),NOSPLIT|NOFRAME,$0
	WORD	$0xe321f0df	// msr cpsr_c, #0xdf
	MOVW	R4, R13
	B	_rt0_tamago_start(SB)

TEXT ·zeroBSS(SB),NOSPLIT|NOFRAME,$0
	MOVW	$runtime·bss(SB), R0
	MOVW	$runtime·enoptrbss(SB), R1
	MOVW	$0, R2
	MOVW	R2, R3
	MOVW	R2, R4
	MOVW	R2, R5
	MOVW	R2, R6
	MOVW	R2, R7
	MOVW	R2, R8
	MOVW	R2, R9
blocks:
	SUB	R0, R1, R12	// bytes left
	CMP	$32, R12
	B.LO	words
	MOVM.IA.W	[R2-R9], (R0)
	B	blocks
words:
	CMP	R1, R0
	B.HS	done
	MOVW.P	R2, 4(R0)
	B	words
done:
	RET
