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

// COPY8 loads the eight words at R0 into R3-R9 and R12 (advancing R0),
// stores them at R1 (advancing R1) and adds them to R2 with the carry.
#define COPY8 \
	MOVM.IA.W	(R0), [R3-R9,R12] \
	MOVM.IA.W	[R3-R9,R12], (R1) \
	ADC.S	R3, R2, R2 \
	ADC.S	R4, R2, R2 \
	ADC.S	R5, R2, R2 \
	ADC.S	R6, R2, R2 \
	ADC.S	R7, R2, R2 \
	ADC.S	R8, R2, R2 \
	ADC.S	R9, R2, R2 \
	ADC.S	R12, R2, R2

// func copySumAligned(dst, src []byte) uint32
//
// The frame is 4 bytes so that the prologue saves LR and R14 is free for
// the end of the 64-byte blocks (R10 is g, R11 the linker's temporary).
// Do not make it $0: a leaf without a frame keeps its return address in
// R14, and RET would jump to the loop bound.
TEXT ·copySumAligned(SB),NOSPLIT,$4-28
	MOVW	dst_base+0(FP), R1
	MOVW	src_base+12(FP), R0
	MOVW	src_len+16(FP), R3
	BIC	$63, R3, R14
	ADD	R0, R14, R14	// end of the 64-byte blocks
	ADD	R0, R3, R3
	MOVW	R3, end-4(SP)	// end (spilled: COPY8 needs R3-R9)
	MOVW	$0, R2
	ADD.S	$0, R2, R2	// clear carry
cloop64:
	TEQ	R0, R14		// leaves C alone
	BEQ	cloop32
	COPY8
	COPY8
	B	cloop64
cloop32:
	MOVW	end-4(SP), R4
	SUB	R0, R4, R5	// SUB without .S leaves C alone
	TST	$32, R5		// so does TST of an unrotated immediate
	BEQ	cwloop
	COPY8
	MOVW	end-4(SP), R4
cwloop:
	TEQ	R0, R4
	BEQ	cdone
	MOVW.P	4(R0), R3
	MOVW.P	R3, 4(R1)
	ADC.S	R3, R2, R2
	B	cwloop
cdone:
	ADC	$0, R2, R2	// the last carry
	MOVW	R2, ret+24(FP)
	RET
