//go:build arm

#include "textflag.h"

// func sumAligned(b []byte) uint32
TEXT ·sumAligned(SB),NOSPLIT,$0-16
	MOVW	b_base+0(FP), R0
	MOVW	b_len+4(FP), R1
	ADD	R0, R1, R1	// end
	MOVW	$0, R2
	ADD.S	$0, R2, R2	// clear carry
loop:
	TEQ	R0, R1		// leaves C alone
	BEQ	done
	MOVM.IA.W	(R0), [R3-R6]
	ADC.S	R3, R2, R2
	ADC.S	R4, R2, R2
	ADC.S	R5, R2, R2
	ADC.S	R6, R2, R2
	MOVM.IA.W	(R0), [R3-R6]
	ADC.S	R3, R2, R2
	ADC.S	R4, R2, R2
	ADC.S	R5, R2, R2
	ADC.S	R6, R2, R2
	B	loop
done:
	ADC	$0, R2, R2	// the last carry
	MOVW	R2, ret+12(FP)
	RET
