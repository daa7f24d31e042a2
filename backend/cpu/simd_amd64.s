#include "textflag.h"

// AVX-512 row kernels of the online softmax (see simd_amd64.go). Every
// loop takes 16 floats at a time and finishes with one masked step.

// TAILMASK sets K1 to the low CX bits (CX < 16).
#define TAILMASK \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1

// func rowMaxAVX512(s *float32, n int, init float32) float32
TEXT ·rowMaxAVX512(SB), NOSPLIT, $0-28
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS init+16(FP), Z0

maxloop:
	CMPQ CX, $16
	JLT  maxtail
	VMAXPS (SI), Z0, Z0
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  maxloop

maxtail:
	TESTQ CX, CX
	JEQ   maxreduce
	TAILMASK
	VMOVAPS Z0, Z1
	VMOVUPS (SI), K1, Z1 // lanes past the end keep the running max
	VMAXPS  Z1, Z0, Z0

maxreduce:
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        X0, ret+24(FP)
	VZEROUPPER
	RET

// EXP computes Z9 = exp(Z0), destroying Z0 and Z8. The argument is
// clamped to [-104, 89] (outside, float32 exp is 0 or +Inf; NaN passes
// through: the clamps return their second source, x, when it is NaN).
// n = round(x·log2 e); r = x - n·ln2 in two parts (Cody-Waite), exact with
// FMA; exp(r) by its Taylor polynomial of degree 7 (error below 1e-8
// relative for |r| <= ln2/2); then VSCALEFPS multiplies by 2^n, going
// gracefully to subnormals, 0 and +Inf.
#define EXP \
	VMAXPS       Z0, Z2, Z0; \
	VMINPS       Z0, Z4, Z0; \
	VMULPS       Z3, Z0, Z8; \
	VRNDSCALEPS  $0, Z8, Z8; \
	VFNMADD231PS Z5, Z8, Z0; \
	VFNMADD231PS Z6, Z8, Z0; \
	EXPPOLY

// EXPPOLY is EXP's second half: Z9 = exp(r)·2^n from r in Z0 (|r| about
// ln2/2 at most) and n in Z8.
#define EXPPOLY \
	VMOVAPS      Z10, Z9; \
	VFMADD213PS  Z11, Z0, Z9; \
	VFMADD213PS  Z12, Z0, Z9; \
	VFMADD213PS  Z13, Z0, Z9; \
	VFMADD213PS  Z14, Z0, Z9; \
	VFMADD213PS  Z15, Z0, Z9; \
	VFMADD213PS  Z16, Z0, Z9; \
	VFMADD213PS  Z16, Z0, Z9; \
	VSCALEFPS    Z8, Z9, Z9

#define CONST(bits, reg) \
	MOVL         $bits, AX; \
	VPBROADCASTD AX, reg

// EXPCONSTS loads the constants EXP uses (Z2-Z6, Z10-Z16; AX is lost).
#define EXPCONSTS \
	CONST(0xc2d00000, Z2); \
	CONST(0x3fb8aa3b, Z3); \
	CONST(0x42b20000, Z4); \
	CONST(0x3f317200, Z5); \
	CONST(0x35bfbe8e, Z6); \
	CONST(0x39500d01, Z10); \
	CONST(0x3ab60b61, Z11); \
	CONST(0x3c088889, Z12); \
	CONST(0x3d2aaaab, Z13); \
	CONST(0x3e2aaaab, Z14); \
	CONST(0x3f000000, Z15); \
	CONST(0x3f800000, Z16)

// Constants, in order: -104, log2 e, 89, ln2 (high part: exact times any n
// here), ln2 (low part), 1/7!, 1/6!, 1/5!, 1/4!, 1/3!, 1/2!, 1/1! = 1/0!.

// func expShiftAVX512(s *float32, n int, m float32) float32
TEXT ·expShiftAVX512(SB), NOSPLIT, $0-28
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z1
	EXPCONSTS
	VPXORD Z7, Z7, Z7

exploop:
	CMPQ    CX, $16
	JLT     exptail
	VMOVUPS (SI), Z0
	VSUBPS  Z1, Z0, Z0
	EXP
	VMOVUPS Z9, (SI)
	VADDPS  Z9, Z7, Z7
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     exploop

exptail:
	TESTQ CX, CX
	JEQ   expreduce
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z1, Z0, Z0
	EXP
	VMOVUPS   Z9, K1, (SI)
	VADDPS    Z9, Z7, K1, Z7

expreduce:
	VEXTRACTF64X4 $1, Z7, Y8
	VADDPS        Y8, Y7, Y7
	VEXTRACTF128  $1, Y7, X8
	VADDPS        X8, X7, X7
	VPERMILPS     $0x4e, X7, X8
	VADDPS        X8, X7, X7
	VPERMILPS     $0xb1, X7, X8
	VADDPS        X8, X7, X7
	VMOVSS        X7, ret+24(FP)
	VZEROUPPER
	RET

// Column kernels of the transposed online softmax: s holds rows rows of
// cols floats; each takes 16 columns at a time (the last block masked) down
// every row.

// func colMaxAVX512(mx, s *float32, rows, cols int)
//
// mx[c] = max(mx[c], s[r·cols + c]) over every row r. Two running maxima
// (even and odd rows) halve the chain of dependent VMAXPS.
TEXT ·colMaxAVX512(SB), NOSPLIT, $0-32
	MOVQ mx+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ rows+16(FP), DX
	MOVQ cols+24(FP), CX
	MOVQ CX, BX
	SHLQ $2, BX // row stride in bytes

cmblock:
	MOVL $0xffff, AX // K1: all 16 columns, or the CX < 16 left
	CMPQ CX, $16
	JGE  cmmask
	TAILMASK

cmmask:
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z0
	VMOVAPS   Z0, Z2
	MOVQ      SI, R8
	MOVQ      DX, R9

cmpair:
	CMPQ      R9, $2
	JLT       cmlast
	VMOVUPS.Z (R8), K1, Z1
	VMAXPS    Z1, Z0, Z0
	VMOVUPS.Z (R8)(BX*1), K1, Z3
	VMAXPS    Z3, Z2, Z2
	LEAQ      (R8)(BX*2), R8
	SUBQ      $2, R9
	JMP       cmpair

cmlast:
	TESTQ     R9, R9
	JEQ       cmstore
	VMOVUPS.Z (R8), K1, Z1
	VMAXPS    Z1, Z0, Z0

cmstore:
	VMAXPS  Z2, Z0, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	SUBQ    $16, CX
	JG      cmblock
	VZEROUPPER
	RET

// func expColsAVX512(s, mx, sum *float32, rows, cols int)
//
// s[r·cols + c] = exp(s[r·cols + c] - mx[c]), and sum[c] += each of them.
TEXT ·expColsAVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ mx+8(FP), DI
	MOVQ sum+16(FP), R10
	MOVQ rows+24(FP), DX
	MOVQ cols+32(FP), CX
	MOVQ CX, BX
	SHLQ $2, BX
	EXPCONSTS

ecblock:
	MOVL $0xffff, AX // K1: all 16 columns, or the CX < 16 left
	CMPQ CX, $16
	JGE  ecmask
	TAILMASK

ecmask:
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z1
	VMOVUPS.Z (R10), K1, Z7
	MOVQ      SI, R8
	MOVQ      DX, R9

ecrow:
	TESTQ     R9, R9
	JEQ       ecstore
	VMOVUPS.Z (R8), K1, Z0
	VSUBPS    Z1, Z0, Z0
	EXP
	VMOVUPS   Z9, K1, (R8)
	VADDPS    Z9, Z7, Z7
	ADDQ      BX, R8
	DECQ      R9
	JMP       ecrow

ecstore:
	VMOVUPS Z7, K1, (R10)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, R10
	SUBQ    $16, CX
	JG      ecblock
	VZEROUPPER
	RET

// func scaleRowAVX512(s *float32, n int, c float32)
TEXT ·scaleRowAVX512(SB), NOSPLIT, $0-20
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS c+16(FP), Z1

scaleloop:
	CMPQ    CX, $16
	JLT     scaletail
	VMULPS  (SI), Z1, Z0
	VMOVUPS Z0, (SI)
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     scaleloop

scaletail:
	TESTQ CX, CX
	JEQ   scaledone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMULPS    Z0, Z1, Z0
	VMOVUPS   Z0, K1, (SI)

scaledone:
	VZEROUPPER
	RET

// func addRowAVX512(dst, src *float32, n int)
TEXT ·addRowAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

addloop:
	CMPQ    CX, $16
	JLT     addtail
	VMOVUPS (DI), Z0
	VADDPS  (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     addloop

addtail:
	TESTQ CX, CX
	JEQ   adddone
	TAILMASK
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VADDPS    Z1, Z0, Z0
	VMOVUPS   Z0, K1, (DI)

adddone:
	VZEROUPPER
	RET

// SIGNCONST puts the sign bit in every lane of Z20 and zero in Z23.
#define SIGNCONST \
	CONST(0x80000000, Z20); \
	VPXORD Z23, Z23, Z23

// GELUCONSTS: SIGNCONST, Z21 = 0.044715, Z22 = 2·√(2/π).
#define GELUCONSTS \
	SIGNCONST; \
	CONST(0x3d372713, Z21); \
	CONST(0x3fcc422a, Z22)

// The logistic functions are evaluated through E = exp(-|t|), which never
// overflows: sigmoid(t) = 1/(1+E) for t >= 0 and E/(1+E) below, so that
// SiLU x·sigmoid(x) and the GELU x·sigmoid(2u) keep their tiny negative
// tails instead of dividing by an infinite 1 + exp(-t).

// Elementwise functions d[i] = f(x[i]) over n elements, 16 at a time and
// one masked step for the rest. In each, x is in Z17 and the result in Z9.

// SiLU: x·sigmoid(x).
//
// func siluAVX512(d, x *float32, n int)
TEXT ·siluAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	SIGNCONST

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	VPORD   Z20, Z17, Z0
	EXP
	VADDPS  Z16, Z9, Z18
	VMULPS  Z17, Z9, Z19
	VCMPPS  $0x1d, Z23, Z17, K2
	VMOVAPS Z17, K2, Z19
	VDIVPS  Z18, Z19, Z9
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	VPORD   Z20, Z17, Z0
	EXP
	VADDPS  Z16, Z9, Z18
	VMULPS  Z17, Z9, Z19
	VCMPPS  $0x1d, Z23, Z17, K2
	VMOVAPS Z17, K2, Z19
	VDIVPS  Z18, Z19, Z9
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// sigmoid: 1 / (1 + exp(-x)).
//
// func sigmoidAVX512(d, x *float32, n int)
TEXT ·sigmoidAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	SIGNCONST

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	VPORD   Z20, Z17, Z0
	EXP
	VADDPS  Z16, Z9, Z18
	VCMPPS  $0x1d, Z23, Z17, K2
	VMOVAPS Z16, K2, Z9
	VDIVPS  Z18, Z9, Z9
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	VPORD   Z20, Z17, Z0
	EXP
	VADDPS  Z16, Z9, Z18
	VCMPPS  $0x1d, Z23, Z17, K2
	VMOVAPS Z16, K2, Z9
	VDIVPS  Z18, Z9, Z9
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// GELU, tanh approximation: 0.5x(1 + tanh(u)) = x·sigmoid(2u) with
// u = √(2/π)(x + 0.044715x³), which has no cancellation for negative x
// (2u has the sign of x).
//
// func geluTanhAVX512(d, x *float32, n int)
TEXT ·geluTanhAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	GELUCONSTS

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	VMULPS      Z17, Z17, Z18
	VMULPS      Z21, Z18, Z18
	VFMADD213PS Z17, Z17, Z18
	VMULPS      Z22, Z18, Z0
	VPORD       Z20, Z0, Z0
	EXP
	VADDPS      Z16, Z9, Z18
	VMULPS      Z17, Z9, Z19
	VCMPPS      $0x1d, Z23, Z17, K2
	VMOVAPS     Z17, K2, Z19
	VDIVPS      Z18, Z19, Z9
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	VMULPS      Z17, Z17, Z18
	VMULPS      Z21, Z18, Z18
	VFMADD213PS Z17, Z17, Z18
	VMULPS      Z22, Z18, Z0
	VPORD       Z20, Z0, Z0
	EXP
	VADDPS      Z16, Z9, Z18
	VMULPS      Z17, Z9, Z19
	VCMPPS      $0x1d, Z23, Z17, K2
	VMOVAPS     Z17, K2, Z19
	VDIVPS      Z18, Z19, Z9
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// GELU, exact: x·Φ(x), Φ(x) = erfc(-x/√2)/2. With z = |x|/√2, erfc(z) =
// t·exp(-z² + P(t)), t = 1/(1 + z/2), P the degree-9 Chebyshev fit of
// Numerical Recipes' erfcc (relative error below 1.2e-7 for every z >= 0),
// so that the negative tail keeps its relative accuracy (PyTorch's
// 1 + erf(x/√2) loses it there). The exponent is -z² + P(t) with z² =
// x²/2 carried exactly, as x·x plus the FMA's rounding error of it, and
// is reduced by n·ln2 before P(t) is added (n from the rounded sum): a
// float32 sum of the two would be off by half an ulp of z², up to 2^-18
// relative to exp's result at z² near 100. Φ(x) = 1 - erfc(z)/2 where x's sign
// bit is clear. |x| is clamped to 16 (NaN passing), past which Φ is 1 or
// 0 in float32, so that ±Inf give ±Inf·Φ as in PyTorch and not an Inf - Inf.
// x is in Z17, the result in Z9; Z18, Z19 and Z7 are lost.
#define GELUERF \
	VPANDND      Z17, Z20, Z19; \
	VMINPS       Z19, Z23, Z19; \
	VMULPS       Z19, Z19, Z18; \
	VMOVAPS      Z18, Z7; \
	VFMSUB231PS  Z19, Z19, Z7; \
	VFMADD213PS  Z16, Z21, Z19; \
	VDIVPS       Z19, Z16, Z19; \
	VMOVAPS      Z1, Z0; \
	VFMADD213PS  Z22, Z19, Z0; \
	VFMADD213PS  Z24, Z19, Z0; \
	VFMADD213PS  Z25, Z19, Z0; \
	VFMADD213PS  Z26, Z19, Z0; \
	VFMADD213PS  Z27, Z19, Z0; \
	VFMADD213PS  Z28, Z19, Z0; \
	VFMADD213PS  Z29, Z19, Z0; \
	VFMADD213PS  Z30, Z19, Z0; \
	VFMADD213PS  Z31, Z19, Z0; \
	VFNMADD231PS Z15, Z7, Z0; \
	VMULPS       Z15, Z18, Z18; \
	VSUBPS       Z18, Z0, Z8; \
	VMULPS       Z3, Z8, Z8; \
	VRNDSCALEPS  $0, Z8, Z8; \
	VFMADD231PS  Z5, Z8, Z18; \
	VFMADD231PS  Z6, Z8, Z18; \
	VSUBPS       Z18, Z0, Z0; \
	EXPPOLY; \
	VMULPS       Z19, Z9, Z9; \
	VMULPS       Z15, Z9, Z9; \
	VPTESTNMD    Z20, Z17, K2; \
	VSUBPS       Z9, Z16, K2, Z9; \
	VMULPS       Z17, Z9, Z9

// GELUERFCONSTS: the sign bit in Z20, 16 in Z23, Z21 = 1/(2√2), and P's
// coefficients c9..c0 in Z1, Z22, Z24-Z31.
#define GELUERFCONSTS \
	CONST(0x80000000, Z20); \
	CONST(0x41800000, Z23); \
	CONST(0x3eb504f3, Z21); \
	CONST(0x3e2ef945, Z1); \
	CONST(0xbf527892, Z22); \
	CONST(0x3fbe87b0, Z24); \
	CONST(0xbf914e5d, Z25); \
	CONST(0x3e8ec7cc, Z26); \
	CONST(0xbe3ec24c, Z27); \
	CONST(0x3dc636c9, Z28); \
	CONST(0x3ebf88fb, Z29); \
	CONST(0x3f8000c7, Z30); \
	CONST(0xbfa1fc4e, Z31)

// func geluErfAVX512(d, x *float32, n int)
TEXT ·geluErfAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	GELUERFCONSTS

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	GELUERF
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	GELUERF
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// exp.
//
// func expAVX512(d, x *float32, n int)
TEXT ·expAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	VMOVAPS Z17, Z0
	EXP
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	VMOVAPS Z17, Z0
	EXP
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// ReLU: max(0, x), NaN staying NaN.
//
// func reluAVX512(d, x *float32, n int)
TEXT ·reluAVX512(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	VPXORD Z23, Z23, Z23

loop:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (SI), Z17
	VMAXPS Z17, Z23, Z9
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     loop

tail:
	TESTQ CX, CX
	JEQ   done
	TAILMASK
	VMOVUPS.Z (SI), K1, Z17
	VMAXPS Z17, Z23, Z9
	VMOVUPS Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// Kernels of the RMSNorm over channels (norm.go), which runs along
// positions: one accumulates the squares of a channel's run of positions,
// the other scales it by the positions' reciprocal norms and the channel's
// weight.

// func sqAccAVX512(acc, x *float32, n int): acc[i] += x[i]·x[i].
TEXT ·sqAccAVX512(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

sqloop:
	CMPQ        CX, $16
	JLT         sqtail
	VMOVUPS     (SI), Z1
	VMOVUPS     (DI), Z0
	VFMADD231PS Z1, Z1, Z0
	VMOVUPS     Z0, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         sqloop

sqtail:
	TESTQ CX, CX
	JEQ   sqdone
	TAILMASK
	VMOVUPS.Z   (SI), K1, Z1
	VMOVUPS.Z   (DI), K1, Z0
	VFMADD231PS Z1, Z1, Z0
	VMOVUPS     Z0, K1, (DI)

sqdone:
	VZEROUPPER
	RET

// func mulScaleAVX512(d, x, r *float32, n int, c float32): d[i] = x[i]·r[i]·c.
TEXT ·mulScaleAVX512(SB), NOSPLIT, $0-36
	MOVQ         d+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         r+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS c+32(FP), Z2

mulloop:
	CMPQ    CX, $16
	JLT     multail
	VMULPS  (DX), Z2, Z0
	VMULPS  (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     mulloop

multail:
	TESTQ CX, CX
	JEQ   muldone
	TAILMASK
	VMOVUPS.Z (DX), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VMULPS    Z0, Z2, Z0
	VMULPS    Z1, Z0, Z0
	VMOVUPS   Z0, K1, (DI)

muldone:
	VZEROUPPER
	RET
