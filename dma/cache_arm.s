//go:build arm

#include "textflag.h"

// func dcacheClean(start, end uintptr)
TEXT ·dcacheClean(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	BIC	$31, R0
clean:
	CMP	R1, R0
	BHS	cleandone
	MCR	15, 0, R0, C7, C10, 1	// DCCMVAC
	ADD	$32, R0
	B	clean
cleandone:
	WORD	$0xf57ff04f		// DSB SY
	RET

// func dcacheInvalidate(start, end uintptr)
TEXT ·dcacheInvalidate(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	BIC	$31, R0
inv:
	CMP	R1, R0
	BHS	invdone
	MCR	15, 0, R0, C7, C6, 1	// DCIMVAC
	ADD	$32, R0
	B	inv
invdone:
	WORD	$0xf57ff04f		// DSB SY
	RET

// func dcacheCleanInvalidate(start, end uintptr)
TEXT ·dcacheCleanInvalidate(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	BIC	$31, R0
flush:
	CMP	R1, R0
	BHS	flushdone
	MCR	15, 0, R0, C7, C14, 1	// DCCIMVAC
	ADD	$32, R0
	B	flush
flushdone:
	WORD	$0xf57ff04f		// DSB SY
	RET

// func dsb()
TEXT ·dsb(SB),NOSPLIT,$0
	WORD	$0xf57ff04f		// DSB SY
	RET
