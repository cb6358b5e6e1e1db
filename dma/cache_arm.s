//go:build arm

#include "textflag.h"

// The loops step by the smallest data cache line of the caches the core
// controls, read from the Cache Type Register (CTR, ARMv7 ARM B4.1.42:
// DminLine, bits 19:16, is log2 of the line in words): 64 bytes on the
// Cortex-A7, 32 on the Cortex-A9. Linux's dcache_line_size
// (arch/arm/mm/proc-macros.S) reads it the same way. A line is visited
// once, not once per 32 bytes. They end without DSB: every caller issues
// Barrier once its maintenance is done (TwoLevel, System).

// LINE sets R2 to the line size in bytes and R3 to line-1 (clobbers R3).
#define LINE \
	MRC	15, 0, R3, C0, C0, 1	/* CTR */ \
	MOVW	R3>>16, R3 \
	AND	$15, R3 \
	MOVW	$4, R2 \
	MOVW	R2<<R3, R2 \
	SUB	$1, R2, R3

// FOUR(crm) applies the by-MVA operation c7,crm,1 to four lines from R0,
// advancing R0 past them (R2: the line size).
#define FOUR(crm) \
	MCR	15, 0, R0, C7, crm, 1 \
	ADD	R2, R0 \
	MCR	15, 0, R0, C7, crm, 1 \
	ADD	R2, R0 \
	MCR	15, 0, R0, C7, crm, 1 \
	ADD	R2, R0 \
	MCR	15, 0, R0, C7, crm, 1 \
	ADD	R2, R0

// func dcacheClean(start, end uintptr)
//
// Four lines per iteration while at least four remain (a TSO segment's
// payload or a full frame is 23-24 lines of 64 bytes), then one at a time:
// 2.75 instructions a line instead of 4. Never past end: a clean by MVA of
// an address beyond the buffer could fault where the mapping ends.
TEXT ·dcacheClean(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	LINE
	BIC	R3, R0
	// R4 = end - 3 lines: four lines remain while R0 < R4. RAM (and so
	// every buffer) lies far above 3 lines, so this does not wrap.
	ADD	R2<<1, R2, R4
	SUB	R4, R1, R4
clean4:
	CMP	R4, R0
	BHS	clean
	FOUR(C10)	// DCCMVAC
	B	clean4
clean:
	CMP	R1, R0
	BHS	cleandone
	MCR	15, 0, R0, C7, C10, 1	// DCCMVAC
	ADD	R2, R0
	B	clean
cleandone:
	RET

// func dcacheInvalidate(start, end uintptr)
TEXT ·dcacheInvalidate(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	LINE
	BIC	R3, R0
inv:
	CMP	R1, R0
	BHS	invdone
	MCR	15, 0, R0, C7, C6, 1	// DCIMVAC
	ADD	R2, R0
	B	inv
invdone:
	RET

// func dcacheInvalidateRange(start, end uintptr)
//
// Invalidates [start, end) without discarding bytes outside it: a line
// only partly inside (at either end) is cleaned and invalidated
// (DCCIMVAC) instead, by the core's real line size, as
// TwoLevel.innerInvalidate does in Go for the 32-byte granule.
TEXT ·dcacheInvalidateRange(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	LINE
	TST	R3, R0
	BEQ	rtail
	BIC	R3, R0, R4
	MCR	15, 0, R4, C7, C14, 1	// DCCIMVAC: the partial first line
	ADD	R2, R4, R0
rtail:
	CMP	R0, R1
	BLS	rdone
	TST	R3, R1
	BEQ	rbody
	BIC	R3, R1, R1
	MCR	15, 0, R1, C7, C14, 1	// DCCIMVAC: the partial last line
rbody:
	// Whole lines from R0 up to R1 (line aligned here): four per
	// iteration while four remain, as dcacheClean, then one at a time.
	// Never past R1: that line holds bytes outside the range.
	ADD	R2<<1, R2, R4
	SUB	R4, R1, R4	// four lines remain while R0 < R4
rbody4:
	CMP	R4, R0
	BHS	rbody1
	FOUR(C6)	// DCIMVAC
	B	rbody4
rbody1:
	CMP	R1, R0
	BHS	rdone
	MCR	15, 0, R0, C7, C6, 1	// DCIMVAC
	ADD	R2, R0
	B	rbody1
rdone:
	RET

// func dcacheCleanInvalidate(start, end uintptr)
TEXT ·dcacheCleanInvalidate(SB),NOSPLIT,$0-8
	MOVW	start+0(FP), R0
	MOVW	end+4(FP), R1
	LINE
	BIC	R3, R0
flush:
	CMP	R1, R0
	BHS	flushdone
	MCR	15, 0, R0, C7, C14, 1	// DCCIMVAC
	ADD	R2, R0
	B	flush
flushdone:
	RET

// func dsb()
TEXT ·dsb(SB),NOSPLIT,$0
	WORD	$0xf57ff04f		// DSB SY
	RET

// func TranslationBarrier()
TEXT ·TranslationBarrier(SB),NOSPLIT,$0
	WORD	$0xf57ff04f		// DSB SY
	WORD	$0xf57ff06f		// ISB SY
	RET
