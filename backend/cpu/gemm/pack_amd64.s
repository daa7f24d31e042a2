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

// func transpose8(dst *float32, dstStride int, src *float32, srcStride int, rows, maskLast int)
//
// transpose16 for AVX2: writes the transpose of a rows×8 block of src
// (rows ≤ 8, row stride srcStride; missing rows read as zero) as 8 rows
// of 8 floats, dstStride apart: dst[i·dstStride + r] = src[r·srcStride +
// i]. Each row's store is 8 floats wide; with maskLast the last one is
// stored under the mask of the low rows lanes, so that nothing is written
// past a block packed rows apart (dstStride = rows ≥ 4: each other store's
// extra lanes are the next row's place, written over by it).
TEXT ·transpose8(SB), NOSPLIT, $0-48
	MOVQ   dst+0(FP), DI
	MOVQ   dstStride+8(FP), R8
	SHLQ   $2, R8
	MOVQ   src+16(FP), SI
	MOVQ   srcStride+24(FP), R9
	SHLQ   $2, R9
	MOVQ   rows+32(FP), CX
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VMOVUPS (SI), Y0
	CMPQ    CX, $1
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y1
	CMPQ    CX, $2
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y2
	CMPQ    CX, $3
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y3
	CMPQ    CX, $4
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y4
	CMPQ    CX, $5
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y5
	CMPQ    CX, $6
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y6
	CMPQ    CX, $7
	JEQ     t8_loaded
	ADDQ    R9, SI
	VMOVUPS (SI), Y7

t8_loaded:
	VUNPCKLPS  Y1, Y0, Y8
	VUNPCKHPS  Y1, Y0, Y9
	VUNPCKLPS  Y3, Y2, Y10
	VUNPCKHPS  Y3, Y2, Y11
	VUNPCKLPS  Y5, Y4, Y12
	VUNPCKHPS  Y5, Y4, Y13
	VUNPCKLPS  Y7, Y6, Y14
	VUNPCKHPS  Y7, Y6, Y15
	VSHUFPS    $0x44, Y10, Y8, Y0
	VSHUFPS    $0xEE, Y10, Y8, Y1
	VSHUFPS    $0x44, Y11, Y9, Y2
	VSHUFPS    $0xEE, Y11, Y9, Y3
	VSHUFPS    $0x44, Y14, Y12, Y4
	VSHUFPS    $0xEE, Y14, Y12, Y5
	VSHUFPS    $0x44, Y15, Y13, Y6
	VSHUFPS    $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS    Y8, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y9, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y10, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y11, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y12, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y13, (DI)
	ADDQ       R8, DI
	VMOVUPS    Y14, (DI)
	ADDQ       R8, DI
	MOVQ       maskLast+40(FP), AX
	TESTQ      AX, AX
	JNE        t8_masked
	VMOVUPS    Y15, (DI)
	VZEROUPPER
	RET

t8_masked:
	NEGQ       CX
	LEAQ       rowMask<>+32(SB), R10
	VMOVDQU    (R10)(CX*4), Y0
	VMASKMOVPS Y15, Y0, (DI)
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

// func roundPairsAVX512(dst *uint32, src *float32, pairs int)
//
// Rounds 2·pairs floats to bfloat16 as dtype.F32ToBF16 does (ties to
// even; a NaN keeps its top bits and is made quiet) and stores them as
// pairs words, word p = bf16(src[2p]) | bf16(src[2p+1])<<16: the bf16
// values in order. pairs is a multiple of 8 (16 floats a step).
TEXT ·roundPairsAVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         pairs+16(FP), CX
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z10
	MOVL         $1, AX
	VPBROADCASTD AX, Z11
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z12
	MOVL         $0x7f800000, AX
	VPBROADCASTD AX, Z13
	MOVL         $0x40, AX
	VPBROADCASTD AX, Z14

rploop:
	CMPQ      CX, $8
	JLT       rpdone
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z1
	VPANDD    Z11, Z1, Z2
	VPADDD    Z10, Z2, Z2
	VPADDD    Z0, Z2, Z2
	VPSRLD    $16, Z2, Z2
	VPANDD    Z12, Z0, Z3
	VPCMPUD   $6, Z13, Z3, K1
	VPORD     Z14, Z1, K1, Z2
	VPMOVDW   Z2, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       rploop

rpdone:
	VZEROUPPER
	RET

// func copyPanel16(dst, src *float32, ldb, kc int)
//
// For p in [0, kc): dst[16p : 16p+16] = src[p·ldb : p·ldb+16]: a whole
// AVX2 B panel (nr = 16) of a matrix whose k steps are contiguous rows,
// two 8-float loads and stores a step instead of a memmove call.
TEXT ·copyPanel16(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    ldb+16(FP), BX
	SHLQ    $2, BX
	MOVQ    kc+24(FP), CX
	TESTQ   CX, CX
	JEQ     done16

loop16:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    BX, SI
	ADDQ    $64, DI
	DECQ    CX
	JNE     loop16

done16:
	VZEROUPPER
	RET

// func copyPanel32(dst, src *float32, ldb, kc int)
//
// copyPanel16 for the AVX-512 kernel's panels (nr = 32): two 16-float
// loads and stores a step.
TEXT ·copyPanel32(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    ldb+16(FP), BX
	SHLQ    $2, BX
	MOVQ    kc+24(FP), CX
	TESTQ   CX, CX
	JEQ     done32

loop32:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ    BX, SI
	ADDQ    $128, DI
	DECQ    CX
	JNE     loop32

done32:
	VZEROUPPER
	RET

// func addBiasAVX2(c *float32, ldc, rows int, bias *float32, cols int)
//
// For i in [0, rows): c[i·ldc : i·ldc+cols] += bias[:cols], eight floats
// at a time, then one at a time (AVX2; callers check).
TEXT ·addBiasAVX2(SB), NOSPLIT, $0-40
	MOVQ c+0(FP), DI
	MOVQ ldc+8(FP), BX
	SHLQ $2, BX
	MOVQ rows+16(FP), CX
	MOVQ bias+24(FP), SI
	MOVQ cols+32(FP), DX

row:
	TESTQ CX, CX
	JEQ   done
	XORQ  AX, AX

vec:
	LEAQ    8(AX), R8
	CMPQ    R8, DX
	JGT     tail
	VMOVUPS (DI)(AX*4), Y0
	VADDPS  (SI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	MOVQ    R8, AX
	JMP     vec

tail:
	CMPQ  AX, DX
	JGE   next
	VMOVSS (DI)(AX*4), X0
	VADDSS (SI)(AX*4), X0, X0
	VMOVSS X0, (DI)(AX*4)
	INCQ  AX
	JMP   tail

next:
	ADDQ BX, DI
	DECQ CX
	JMP  row

done:
	VZEROUPPER
	RET
