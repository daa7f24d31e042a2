#include "textflag.h"

// func copyRows16(dst, src *float32, lda, rows, kc int)
//
// For p in [0, kc): dst[p·rows : (p+1)·rows] = src[p·lda : p·lda+rows], rows
// ≤ 16: one masked load and store per step (see packRowsContiguous).
TEXT ·copyRows16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lda+16(FP), BX
	SHLQ $2, BX
	MOVQ rows+24(FP), CX
	MOVQ kc+32(FP), DX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	SHLQ $2, CX

loop:
	TESTQ     DX, DX
	JEQ       done
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS   Z0, K1, (DI)
	ADDQ      BX, SI
	ADDQ      CX, DI
	DECQ      DX
	JMP       loop

done:
	VZEROUPPER
	RET
