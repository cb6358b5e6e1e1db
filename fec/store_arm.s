#include "textflag.h"

// func storeWord(p *uint32, v uint32)
TEXT ·storeWord(SB), NOSPLIT, $0-8
	MOVW	p+0(FP), R0
	MOVW	v+4(FP), R1
	MOVW	R1, (R0)
	RET
