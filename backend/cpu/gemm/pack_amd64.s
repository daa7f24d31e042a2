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

// func copyRows8(dst, src *float32, lda, rows, kc, fast int)
//
// copyRows16 for AVX2, rows ≤ 8. The first fast steps copy 8 floats
// unmasked: the load's extra floats lie before the next step's (lda ≥ 8)
// and the store's extra floats are the next step's place, written over by
// it (rows ≥ 4). The rest go through VMASKMOVPS, whose masked-off lanes
// are neither read nor written. (Masked stores are slow on AMD's cores,
// so the unmasked ones carry the steps they can.)
TEXT ·copyRows8(SB), NOSPLIT, $0-48
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    lda+16(FP), BX
	SHLQ    $2, BX
	MOVQ    rows+24(FP), CX
	MOVQ    kc+32(FP), DX
	MOVQ    fast+40(FP), R9
	MOVQ    CX, AX
	NEGQ    AX
	LEAQ    rowMask<>+32(SB), R8
	VMOVDQU (R8)(AX*4), Y1
	SHLQ    $2, CX
	SUBQ    R9, DX

fastloop:
	TESTQ   R9, R9
	JEQ     maskloop
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ    BX, SI
	ADDQ    CX, DI
	DECQ    R9
	JMP     fastloop

maskloop:
	TESTQ      DX, DX
	JEQ        done8
	VMASKMOVPS (SI), Y1, Y0
	VMASKMOVPS Y0, Y1, (DI)
	ADDQ       BX, SI
	ADDQ       CX, DI
	DECQ       DX
	JMP        maskloop

done8:
	VZEROUPPER
	RET

// rowMask: eight all-ones lanes then eight zero lanes; the 8 lanes at
// +32-4n are the mask of the low n.
DATA rowMask<>+0(SB)/4, $0xffffffff
DATA rowMask<>+4(SB)/4, $0xffffffff
DATA rowMask<>+8(SB)/4, $0xffffffff
DATA rowMask<>+12(SB)/4, $0xffffffff
DATA rowMask<>+16(SB)/4, $0xffffffff
DATA rowMask<>+20(SB)/4, $0xffffffff
DATA rowMask<>+24(SB)/4, $0xffffffff
DATA rowMask<>+28(SB)/4, $0xffffffff
DATA rowMask<>+32(SB)/4, $0
DATA rowMask<>+36(SB)/4, $0
DATA rowMask<>+40(SB)/4, $0
DATA rowMask<>+44(SB)/4, $0
DATA rowMask<>+48(SB)/4, $0
DATA rowMask<>+52(SB)/4, $0
DATA rowMask<>+56(SB)/4, $0
DATA rowMask<>+60(SB)/4, $0
GLOBL rowMask<>(SB), RODATA|NOPTR, $64
