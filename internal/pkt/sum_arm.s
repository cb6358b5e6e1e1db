//go:build arm

#include "textflag.h"

// ADD4 loads the four words at R0 (advancing it) and adds them to R2 with
// the carry.
#define ADD4 \
	MOVM.IA.W	(R0), [R3-R6] \
	ADC.S	R3, R2, R2 \
	ADC.S	R4, R2, R2 \
	ADC.S	R5, R2, R2 \
	ADC.S	R6, R2, R2

// func sumAligned(b []byte) uint32
TEXT ·sumAligned(SB),NOSPLIT,$0-16
	MOVW	b_base+0(FP), R0
	MOVW	b_len+4(FP), R1
	BIC	$63, R1, R8
	ADD	R0, R8, R8	// end of the 64-byte blocks
	BIC	$31, R1, R7
	ADD	R0, R7, R7	// end of the 32-byte blocks
	ADD	R0, R1, R1	// end
	MOVW	$0, R2
	ADD.S	$0, R2, R2	// clear carry
loop64:
	TEQ	R0, R8		// leaves C alone
	BEQ	loop32
	ADD4
	ADD4
	ADD4
	ADD4
	B	loop64
loop32:
	TEQ	R0, R7
	BEQ	words
	ADD4
	ADD4
words:
	TEQ	R0, R1
	BEQ	done
	MOVW.P	4(R0), R3
	ADC.S	R3, R2, R2
	B	words
done:
	ADC	$0, R2, R2	// the last carry
	MOVW	R2, ret+12(FP)
	RET
