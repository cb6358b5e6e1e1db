#include "textflag.h"

// func storeWord(p *uint32, v uint32)
TEXT ·storeWord(SB), NOSPLIT, $0-8
	MOVW	p+0(FP), R0
	MOVW	v+4(FP), R1
	MOVW	R1, (R0)
	RET

// func loadWord(p *uint32) uint32
TEXT ·loadWord(SB), NOSPLIT, $0-8
	MOVW	p+0(FP), R0
	MOVW	(R0), R1
	MOVW	R1, ret+4(FP)
	RET

// func rmb()
TEXT ·rmb(SB), NOSPLIT, $0-0
	WORD	$0xf57ff053	// DMB OSH
	RET

// func storeExt(d unsafe.Pointer, addr, ext0 uint32)
TEXT ·storeExt(SB), NOSPLIT, $0-12
	MOVW	d+0(FP), R0
	MOVW	addr+4(FP), R1
	MOVW	ext0+8(FP), R2
	MOVW	$0, R3
	MOVW	R1, 4(R0)	// dwAddr
	MOVW	R2, 8(R0)	// dwExt0
	MOVW	R3, 12(R0)	// dwExt1
	MOVW	R3, 16(R0)	// dwExt2
	RET

// func loadExt(d unsafe.Pointer) (e2, e0, e1 uint32)
TEXT ·loadExt(SB), NOSPLIT, $0-16
	MOVW	d+0(FP), R0
	MOVW	16(R0), R1	// dwExt2
	WORD	$0xf57ff053	// DMB OSH: ext0 and ext1 are read after BDU
	MOVW	8(R0), R2	// dwExt0
	MOVW	12(R0), R3	// dwExt1
	MOVW	R1, e2+4(FP)
	MOVW	R2, e0+8(FP)
	MOVW	R3, e1+12(FP)
	RET
