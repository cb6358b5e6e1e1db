//go:build tamago && arm

#include "textflag.h"

// func call(op, r1, r2, r3 uint32) (s, v uint32)
TEXT ·call(SB),NOSPLIT,$0-24
	MOVW	op+0(FP), R0
	MOVW	r1+4(FP), R1
	MOVW	r2+8(FP), R2
	MOVW	r3+12(FP), R3
	WORD	$0xe1600070 // smc #0
	MOVW	R0, s+16(FP)
	MOVW	R1, v+20(FP)
	RET
