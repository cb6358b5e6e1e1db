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
