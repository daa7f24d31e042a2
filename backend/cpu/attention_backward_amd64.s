#include "textflag.h"

// AVX-512 element kernel of the attention backward (see
// attention_backward_amd64.go): 16 floats at a time, one masked step at
// the end of every row.

// func scoreGradsAVX512(dp, pt, dd *float32, rows, cols int)
// dp[r·cols + c] = pt[r·cols + c]·(dp[r·cols + c] − dd[c]).
TEXT ·scoreGradsAVX512(SB), NOSPLIT, $0-40
	MOVQ dp+0(FP), DI
	MOVQ pt+8(FP), SI
	MOVQ rows+24(FP), R8
	MOVQ cols+32(FP), R9

	// K1: the low cols%16 bits, the last step of every row.
	MOVQ  R9, CX
	ANDQ  $15, CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K1

rowloop:
	TESTQ R8, R8
	JEQ   done
	MOVQ  dd+16(FP), DX
	MOVQ  R9, CX

colloop:
	CMPQ    CX, $16
	JLT     coltail
	VMOVUPS (DI), Z0
	VSUBPS  (DX), Z0, Z0
	VMULPS  (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     colloop

coltail:
	TESTQ     CX, CX
	JEQ       nextrow
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z (DX), K1, Z1
	VMOVUPS.Z (SI), K1, Z2
	VSUBPS    Z1, Z0, Z0
	VMULPS    Z2, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
	LEAQ      (DI)(CX*4), DI
	LEAQ      (SI)(CX*4), SI

nextrow:
	DECQ R8
	JMP  rowloop

done:
	VZEROUPPER
	RET

// func dotAVX512(a, b *float32, n int) float32
// Σ a[i]·b[i], in two vector accumulators (the scalar loop waited on
// every add: 2.6% of the backward at D = 128).
TEXT ·dotAVX512(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DX
	MOVQ   n+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1

dotloop2:
	CMPQ        CX, $32
	JLT         dotloop
	VMOVUPS     (SI), Z2
	VMOVUPS     64(SI), Z3
	VFMADD231PS (DX), Z2, Z0
	VFMADD231PS 64(DX), Z3, Z1
	ADDQ        $128, SI
	ADDQ        $128, DX
	SUBQ        $32, CX
	JMP         dotloop2

dotloop:
	CMPQ        CX, $16
	JLT         dottail
	VMOVUPS     (SI), Z2
	VFMADD231PS (DX), Z2, Z0
	ADDQ        $64, SI
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         dotloop

dottail:
	TESTQ       CX, CX
	JEQ         dotreduce
	MOVL        $1, AX
	SHLL        CX, AX
	DECL        AX
	KMOVW       AX, K1
	VMOVUPS.Z   (SI), K1, Z2
	VMOVUPS.Z   (DX), K1, Z3
	VFMADD231PS Z3, Z2, Z1

dotreduce:
	VADDPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VADDPS        X1, X0, X0
	VMOVSS        X0, ret+24(FP)
	VZEROUPPER
	RET
