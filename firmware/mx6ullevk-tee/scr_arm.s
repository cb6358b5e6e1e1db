//go:build tamago && arm

#include "textflag.h"

// SCR, Secure Configuration Register (ARMv7-A ARM B4.1.129): MRC/MCR
// p15, 0, <Rt>, c1, c1, 0.

// func readSCR() uint32
TEXT ·readSCR(SB),NOSPLIT,$0-4
	MRC	15, 0, R0, C1, C1, 0
	MOVW	R0, ret+0(FP)
	RET

// func writeSCR(v uint32)
TEXT ·writeSCR(SB),NOSPLIT,$0-4
	MOVW	v+0(FP), R0
	MCR	15, 0, R0, C1, C1, 0
	WORD	$0xf57ff06f // isb
	RET
