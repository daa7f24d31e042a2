#include "textflag.h"

// AVX2 + FMA versions of the kernels in simd_amd64.s, conv_panels_amd64.s
// and attention_backward_amd64.s, for CPUs without AVX-512 (every Intel
// client chip since Alder Lake, AMD before Zen 4). 8 floats at a time;
// a tail of fewer goes through VMASKMOVPS under a mask from tailMask
// (masked-off lanes are neither read nor written, so they never fault).
// AVX2 has 16 vector registers to AVX-512's 32, so the constants live in
// memory (32-byte vectors below) rather than in registers.

// TAILMASK2(n, tmp, dst) loads into dst the mask of the low n lanes
// (0 <= n <= 8), negating n.
#define TAILMASK2(n, tmp, dst) \
	NEGQ    n; \
	LEAQ    tailMask<>+32(SB), tmp; \
	VMOVDQU (tmp)(n*4), dst

// EXP8 computes Y9 = exp(Y0), destroying Y0, Y7 and Y8: the algorithm of
// simd_amd64.s's EXP (clamp to [-104, 89], NaN passing through; Cody-Waite
// reduction by n = round(x·log2 e); degree-7 Taylor polynomial) with the
// same constants, so that both give the same results. AVX2 has no
// VSCALEFPS: 2^n is applied as 2^(n>>1) times 2^(n - n>>1), two normal
// powers of two for every n in [-150, 128], which rounds once, as
// VSCALEFPS does, into subnormals, 0 and +Inf.
#define EXP8 \
	VMOVUPS      expLo<>(SB), Y8; \
	VMAXPS       Y0, Y8, Y0; \
	VMOVUPS      expHi<>(SB), Y8; \
	VMINPS       Y0, Y8, Y0; \
	VMULPS       log2e<>(SB), Y0, Y8; \
	VROUNDPS     $0, Y8, Y8; \
	VFNMADD231PS ln2hi<>(SB), Y8, Y0; \
	VFNMADD231PS ln2lo<>(SB), Y8, Y0; \
	EXP8POLY

// EXP8POLY is EXP8's second half: Y9 = exp(r)·2^n from r in Y0 (|r| about
// ln2/2 at most) and n in Y8 (a float in [-252, 254]), destroying Y7 and Y8.
#define EXP8POLY \
	VMOVUPS      expC7<>(SB), Y9; \
	VFMADD213PS  expC6<>(SB), Y0, Y9; \
	VFMADD213PS  expC5<>(SB), Y0, Y9; \
	VFMADD213PS  expC4<>(SB), Y0, Y9; \
	VFMADD213PS  expC3<>(SB), Y0, Y9; \
	VFMADD213PS  expC2<>(SB), Y0, Y9; \
	VFMADD213PS  one<>(SB), Y0, Y9; \
	VFMADD213PS  one<>(SB), Y0, Y9; \
	VCVTPS2DQ    Y8, Y8; \
	VPSRAD       $1, Y8, Y7; \
	VPSUBD       Y7, Y8, Y8; \
	VPADDD       expBias<>(SB), Y7, Y7; \
	VPSLLD       $23, Y7, Y7; \
	VPADDD       expBias<>(SB), Y8, Y8; \
	VPSLLD       $23, Y8, Y8; \
	VMULPS       Y7, Y9, Y9; \
	VMULPS       Y8, Y9, Y9

// EXP8X2 is EXP8 on two vectors at once, its instructions interleaved:
// Y9 = exp(Y0) (destroying Y0, Y7, Y8) and Y5 = exp(Y2) (destroying Y2,
// Y3, Y4). One exp is a chain of about 50 cycles of dependent
// instructions, which one vector an iteration could not keep the FP pipes
// busy with: two interleaved ran expColsAVX2 in 0.82x the time on Zen 3
// (BenchmarkSoftmaxColumns). Written once with register parameters and
// used twice, one exp after the other, it took 1.12x this copy's time, and
// interleaved by stages of 4-9 instructions 1.09x: the instruction-by-
// instruction interleave is the point of the copy.
#define EXP8X2 \
	VMOVUPS      expLo<>(SB), Y8; \
	VMAXPS       Y0, Y8, Y0; \
	VMAXPS       Y2, Y8, Y2; \
	VMOVUPS      expHi<>(SB), Y8; \
	VMINPS       Y0, Y8, Y0; \
	VMINPS       Y2, Y8, Y2; \
	VMULPS       log2e<>(SB), Y0, Y8; \
	VMULPS       log2e<>(SB), Y2, Y4; \
	VROUNDPS     $0, Y8, Y8; \
	VROUNDPS     $0, Y4, Y4; \
	VFNMADD231PS ln2hi<>(SB), Y8, Y0; \
	VFNMADD231PS ln2hi<>(SB), Y4, Y2; \
	VFNMADD231PS ln2lo<>(SB), Y8, Y0; \
	VFNMADD231PS ln2lo<>(SB), Y4, Y2; \
	VMOVUPS      expC7<>(SB), Y9; \
	VMOVUPS      Y9, Y5; \
	VFMADD213PS  expC6<>(SB), Y0, Y9; \
	VFMADD213PS  expC6<>(SB), Y2, Y5; \
	VFMADD213PS  expC5<>(SB), Y0, Y9; \
	VFMADD213PS  expC5<>(SB), Y2, Y5; \
	VFMADD213PS  expC4<>(SB), Y0, Y9; \
	VFMADD213PS  expC4<>(SB), Y2, Y5; \
	VFMADD213PS  expC3<>(SB), Y0, Y9; \
	VFMADD213PS  expC3<>(SB), Y2, Y5; \
	VFMADD213PS  expC2<>(SB), Y0, Y9; \
	VFMADD213PS  expC2<>(SB), Y2, Y5; \
	VFMADD213PS  one<>(SB), Y0, Y9; \
	VFMADD213PS  one<>(SB), Y2, Y5; \
	VFMADD213PS  one<>(SB), Y0, Y9; \
	VFMADD213PS  one<>(SB), Y2, Y5; \
	VCVTPS2DQ    Y8, Y8; \
	VCVTPS2DQ    Y4, Y4; \
	VPSRAD       $1, Y8, Y7; \
	VPSRAD       $1, Y4, Y3; \
	VPSUBD       Y7, Y8, Y8; \
	VPSUBD       Y3, Y4, Y4; \
	VPADDD       expBias<>(SB), Y7, Y7; \
	VPADDD       expBias<>(SB), Y3, Y3; \
	VPSLLD       $23, Y7, Y7; \
	VPSLLD       $23, Y3, Y3; \
	VPADDD       expBias<>(SB), Y8, Y8; \
	VPADDD       expBias<>(SB), Y4, Y4; \
	VPSLLD       $23, Y8, Y8; \
	VPSLLD       $23, Y4, Y4; \
	VMULPS       Y7, Y9, Y9; \
	VMULPS       Y3, Y5, Y5; \
	VMULPS       Y8, Y9, Y9; \
	VMULPS       Y4, Y5, Y5

// HSUM folds the 8 lanes of Y0 into X0's lane 0 (X1 is lost); HMAX the same
// with max.
#define HSUM \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VPERMILPS    $0x4e, X0, X1; \
	VADDPS       X1, X0, X0; \
	VPERMILPS    $0xb1, X0, X1; \
	VADDPS       X1, X0, X0

#define HMAX \
	VEXTRACTF128 $1, Y0, X1; \
	VMAXPS       X1, X0, X0; \
	VPERMILPS    $0x4e, X0, X1; \
	VMAXPS       X1, X0, X0; \
	VPERMILPS    $0xb1, X0, X1; \
	VMAXPS       X1, X0, X0

// func rowMaxAVX2(s *float32, n int, init float32) float32
// Two running maxima halve the chain of dependent VMAXPS.
TEXT ·rowMaxAVX2(SB), NOSPLIT, $0-28
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS init+16(FP), Y0
	VMOVAPS      Y0, Y1

maxloop2:
	CMPQ   CX, $16
	JLT    maxloop
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    maxloop2

maxloop:
	CMPQ   CX, $8
	JLT    maxtail
	VMAXPS (SI), Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX

maxtail:
	TESTQ      CX, CX
	JEQ        maxreduce
	TAILMASK2(CX, AX, Y2)
	VMASKMOVPS (SI), Y2, Y3
	VBLENDVPS  Y2, Y3, Y0, Y3 // lanes past the end keep the running max
	VMAXPS     Y3, Y0, Y0

maxreduce:
	VMAXPS  Y1, Y0, Y0
	HMAX
	VMOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func expShiftAVX2(s *float32, n int, m float32) float32
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-28
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Y1
	VXORPS       Y6, Y6, Y6

exploop:
	CMPQ    CX, $8
	JLT     exptail
	VMOVUPS (SI), Y0
	VSUBPS  Y1, Y0, Y0
	EXP8
	VMOVUPS Y9, (SI)
	VADDPS  Y9, Y6, Y6
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     exploop

exptail:
	TESTQ      CX, CX
	JEQ        expreduce
	TAILMASK2(CX, AX, Y2)
	VMASKMOVPS (SI), Y2, Y0
	VSUBPS     Y1, Y0, Y0
	EXP8
	VMASKMOVPS Y9, Y2, (SI)
	VANDPS     Y2, Y9, Y9 // lanes past the end add nothing
	VADDPS     Y9, Y6, Y6

expreduce:
	VMOVAPS Y6, Y0
	HSUM
	VMOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// Column kernels of the transposed online softmax (see simd_amd64.s). Like
// the AVX-512 ones, they take the columns 16 at a time (one 64-byte line of
// a row) and walk each block down all the rows with its running values in
// registers; attention's score panels (the AVX2 GEMM's B panels) are
// exactly one block wide, 64 bytes a row. A last block of fewer than 16
// columns loads and stores under the masks Y14 and Y15 (AMD's masked
// stores are slow, but no panel has such a block). Sweeping row by row
// with the running values in memory, as the kernels before did, took 2.7x
// the time for colMax and 1.1x for expCols on 32-wide panels
// (BenchmarkSoftmaxColumns, Zen 3): the store-to-load chain each row was
// the critical path. Blocks of 8 columns, half a line, lost the line's
// other half to L1 set conflicts when rows were 512 bytes apart.

// TAILMASK16(n) sets Y14 to the mask of lanes < min(n, 8) and Y15 to that
// of lanes < n - 8 (none if n <= 8), for a block of 0 <= n < 16 columns,
// using AX and R13.
#define TAILMASK16(n) \
	MOVQ n, AX; \
	CMPQ AX, $8; \
	JLE  2(PC); \
	MOVQ $8, AX; \
	TAILMASK2(AX, R13, Y14); \
	MOVQ n, AX; \
	SUBQ $8, AX; \
	JGE  2(PC); \
	XORQ AX, AX; \
	TAILMASK2(AX, R13, Y15)

// func colMaxAVX2(mx, s *float32, rows, cols int)
TEXT ·colMaxAVX2(SB), NOSPLIT, $0-32
	MOVQ mx+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ rows+16(FP), DX
	MOVQ cols+24(FP), CX
	MOVQ CX, R12
	SHLQ $2, R12 // row stride in bytes

cmblock:
	CMPQ    CX, $16
	JLT     cmtail
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	MOVQ    SI, R8
	MOVQ    DX, R9

cmrow:
	TESTQ   R9, R9
	JEQ     cmstore
	VMOVUPS (R8), Y2
	VMAXPS  Y0, Y2, Y0 // x > mx ? x : mx, as colMaxGo
	VMOVUPS 32(R8), Y3
	VMAXPS  Y1, Y3, Y1
	ADDQ    R12, R8
	DECQ    R9
	JMP     cmrow

cmstore:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     cmblock

cmtail:
	TESTQ      CX, CX
	JEQ        cmdone
	TAILMASK16(CX)
	VMASKMOVPS (DI), Y14, Y0
	VMASKMOVPS 32(DI), Y15, Y1

cmtrow:
	TESTQ      DX, DX
	JEQ        cmtstore
	VMASKMOVPS (SI), Y14, Y2
	VMAXPS     Y0, Y2, Y0
	VMASKMOVPS 32(SI), Y15, Y3
	VMAXPS     Y1, Y3, Y1
	ADDQ       R12, SI
	DECQ       DX
	JMP        cmtrow

cmtstore:
	VMASKMOVPS Y0, Y14, (DI)
	VMASKMOVPS Y1, Y15, 32(DI)

cmdone:
	VZEROUPPER
	RET

// func expColsAVX2(s, mx, sum *float32, rows, cols int)
//
// The maxima of a block stay in Y12 and Y13, its sums in Y10 and Y11; one
// row of the block (two vectors) an iteration, their exps interleaved.
TEXT ·expColsAVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ mx+8(FP), DI
	MOVQ sum+16(FP), R10
	MOVQ rows+24(FP), DX
	MOVQ cols+32(FP), CX
	MOVQ CX, R12
	SHLQ $2, R12 // row stride in bytes

ecblock:
	CMPQ    CX, $16
	JLT     ectail
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	VMOVUPS (R10), Y10
	VMOVUPS 32(R10), Y11
	MOVQ    SI, R8
	MOVQ    DX, R9

ecrow:
	TESTQ   R9, R9
	JEQ     ecstore
	VMOVUPS (R8), Y0
	VSUBPS  Y12, Y0, Y0
	VMOVUPS 32(R8), Y2
	VSUBPS  Y13, Y2, Y2
	EXP8X2
	VMOVUPS Y9, (R8)
	VMOVUPS Y5, 32(R8)
	VADDPS  Y9, Y10, Y10
	VADDPS  Y5, Y11, Y11
	ADDQ    R12, R8
	DECQ    R9
	JMP     ecrow

ecstore:
	VMOVUPS Y10, (R10)
	VMOVUPS Y11, 32(R10)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, R10
	SUBQ    $16, CX
	JMP     ecblock

ectail:
	TESTQ      CX, CX
	JEQ        ecdone
	TAILMASK16(CX)
	VMASKMOVPS (DI), Y14, Y12
	VMASKMOVPS 32(DI), Y15, Y13
	VMASKMOVPS (R10), Y14, Y10
	VMASKMOVPS 32(R10), Y15, Y11

ectrow:
	TESTQ      DX, DX
	JEQ        ectstore
	VMASKMOVPS (SI), Y14, Y0
	VSUBPS     Y12, Y0, Y0
	VMASKMOVPS 32(SI), Y15, Y2
	VSUBPS     Y13, Y2, Y2
	EXP8X2
	VMASKMOVPS Y9, Y14, (SI)
	VMASKMOVPS Y5, Y15, 32(SI)
	VADDPS     Y9, Y10, Y10
	VADDPS     Y5, Y11, Y11
	ADDQ       R12, SI
	DECQ       DX
	JMP        ectrow

ectstore:
	VMASKMOVPS Y10, Y14, (R10)
	VMASKMOVPS Y11, Y15, 32(R10)

ecdone:
	VZEROUPPER
	RET

// func scaleRowAVX2(s *float32, n int, c float32)
TEXT ·scaleRowAVX2(SB), NOSPLIT, $0-20
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS c+16(FP), Y1

scaleloop:
	CMPQ    CX, $8
	JLT     scaletail
	VMULPS  (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     scaleloop

scaletail:
	TESTQ      CX, CX
	JEQ        scaledone
	TAILMASK2(CX, AX, Y2)
	VMASKMOVPS (SI), Y2, Y0
	VMULPS     Y0, Y1, Y0
	VMASKMOVPS Y0, Y2, (SI)

scaledone:
	VZEROUPPER
	RET

// func addRowAVX2(dst, src *float32, n int)
TEXT ·addRowAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

addloop:
	CMPQ    CX, $8
	JLT     addtail
	VMOVUPS (DI), Y0
	VADDPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     addloop

addtail:
	TESTQ      CX, CX
	JEQ        adddone
	TAILMASK2(CX, AX, Y2)
	VMASKMOVPS (DI), Y2, Y0
	VMASKMOVPS (SI), Y2, Y1
	VADDPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y2, (DI)

adddone:
	VZEROUPPER
	RET

// func sqAccAVX2(acc, x *float32, n int): acc[i] += x[i]·x[i].
TEXT ·sqAccAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

sqloop:
	CMPQ        CX, $8
	JLT         sqtail
	VMOVUPS     (SI), Y1
	VMOVUPS     (DI), Y0
	VFMADD231PS Y1, Y1, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         sqloop

sqtail:
	TESTQ       CX, CX
	JEQ         sqdone
	TAILMASK2(CX, AX, Y2)
	VMASKMOVPS  (SI), Y2, Y1
	VMASKMOVPS  (DI), Y2, Y0
	VFMADD231PS Y1, Y1, Y0
	VMASKMOVPS  Y0, Y2, (DI)

sqdone:
	VZEROUPPER
	RET

// func mulScaleAVX2(d, x, r *float32, n int, c float32): d[i] = x[i]·r[i]·c.
TEXT ·mulScaleAVX2(SB), NOSPLIT, $0-36
	MOVQ         d+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         r+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS c+32(FP), Y2

mulloop:
	CMPQ    CX, $8
	JLT     multail
	VMULPS  (DX), Y2, Y0
	VMULPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     mulloop

multail:
	TESTQ      CX, CX
	JEQ        muldone
	TAILMASK2(CX, AX, Y3)
	VMASKMOVPS (DX), Y3, Y0
	VMASKMOVPS (SI), Y3, Y1
	VMULPS     Y0, Y2, Y0
	VMULPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y3, (DI)

muldone:
	VZEROUPPER
	RET

// Elementwise functions d[i] = f(x[i]): x in Y10, the result in Y9, the
// tail's mask in Y15. The logistic ones go through E = exp(-|t|) as in
// simd_amd64.s, choosing by the sign bit of x (which VBLENDVPS reads
// directly; -0 and NaN come out the same either way).

// LOGISTIC sets Y9 = (x < 0 ? x·E : x) / (1 + E) from E in Y9.
#define LOGISTIC \
	VADDPS    one<>(SB), Y9, Y11; \
	VMULPS    Y10, Y9, Y12; \
	VBLENDVPS Y10, Y12, Y10, Y12; \
	VDIVPS    Y11, Y12, Y9

#define SILU \
	VORPS signBit<>(SB), Y10, Y0; \
	EXP8; \
	LOGISTIC

#define SIGMOID \
	VORPS     signBit<>(SB), Y10, Y0; \
	EXP8; \
	VADDPS    one<>(SB), Y9, Y11; \
	VMOVUPS   one<>(SB), Y12; \
	VBLENDVPS Y10, Y9, Y12, Y12; \
	VDIVPS    Y11, Y12, Y9

// GELU, tanh approximation: x·sigmoid(2u), u = √(2/π)(x + 0.044715x³).
#define GELU \
	VMULPS      Y10, Y10, Y11; \
	VMULPS      geluA<>(SB), Y11, Y11; \
	VFMADD213PS Y10, Y10, Y11; \
	VMULPS      geluB<>(SB), Y11, Y0; \
	VORPS       signBit<>(SB), Y0, Y0; \
	EXP8; \
	LOGISTIC

#define EXPX \
	VMOVAPS Y10, Y0; \
	EXP8

// ReLU: max(0, x), NaN staying NaN (Y13 holds zeros).
#define RELU \
	VMAXPS Y10, Y13, Y9

// UNARYLOOP is the loop of every elementwise function, body being one of
// the macros above, over n (CX) elements from x (SI) to d (DI). (The
// arguments are loaded outside it, where go vet can check them.)
#define UNARYLOOP(body) \
	VXORPS Y13, Y13, Y13; \
loop: \
	CMPQ    CX, $8; \
	JLT     tail; \
	VMOVUPS (SI), Y10; \
	body; \
	VMOVUPS Y9, (DI); \
	ADDQ    $32, SI; \
	ADDQ    $32, DI; \
	SUBQ    $8, CX; \
	JMP     loop; \
tail: \
	TESTQ      CX, CX; \
	JEQ        done; \
	TAILMASK2(CX, AX, Y15); \
	VMASKMOVPS (SI), Y15, Y10; \
	body; \
	VMASKMOVPS Y9, Y15, (DI); \
done: \
	VZEROUPPER; \
	RET

// func siluAVX2(d, x *float32, n int)
TEXT ·siluAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(SILU)

// func sigmoidAVX2(d, x *float32, n int)
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(SIGMOID)

// func geluTanhAVX2(d, x *float32, n int)
TEXT ·geluTanhAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(GELU)

// GELU, exact: x·Φ(x), as simd_amd64.s's GELUERF computes it (the same
// fit, the same clamp, the same reduction). min(|x|, 16) then t in Y12, its
// square in Y11 and the square's rounding error in Y14; Y1 and Y2 are lost.
#define GELUERF \
	VMOVUPS      signBit<>(SB), Y1; \
	VANDNPS      Y10, Y1, Y12; \
	VBROADCASTSS erfMax<>(SB), Y1; \
	VMINPS       Y12, Y1, Y12; \
	VMULPS       Y12, Y12, Y11; \
	VMOVAPS      Y11, Y14; \
	VFMSUB231PS  Y12, Y12, Y14; \
	VBROADCASTSS erfK<>(SB), Y1; \
	VFMADD213PS  one<>(SB), Y1, Y12; \
	VMOVUPS      one<>(SB), Y1; \
	VDIVPS       Y12, Y1, Y12; \
	VBROADCASTSS erfP<>+36(SB), Y0; \
	VBROADCASTSS erfP<>+32(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+28(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+24(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+20(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+16(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+12(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+8(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+4(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfP<>+0(SB), Y1; \
	VFMADD213PS  Y1, Y12, Y0; \
	VBROADCASTSS erfHalf<>(SB), Y1; \
	VFNMADD231PS Y1, Y14, Y0; \
	VMULPS       Y1, Y11, Y11; \
	VSUBPS       Y11, Y0, Y8; \
	VMULPS       log2e<>(SB), Y8, Y8; \
	VROUNDPS     $0, Y8, Y8; \
	VFMADD231PS  ln2hi<>(SB), Y8, Y11; \
	VFMADD231PS  ln2lo<>(SB), Y8, Y11; \
	VSUBPS       Y11, Y0, Y0; \
	EXP8POLY; \
	VMULPS       Y12, Y9, Y9; \
	VMULPS       Y1, Y9, Y9; \
	VMOVUPS      one<>(SB), Y2; \
	VSUBPS       Y9, Y2, Y2; \
	VBLENDVPS    Y10, Y9, Y2, Y9; \
	VMULPS       Y10, Y9, Y9

// func geluErfAVX2(d, x *float32, n int)
TEXT ·geluErfAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(GELUERF)

// func expAVX2(d, x *float32, n int)
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(EXPX)

// func reluAVX2(d, x *float32, n int)
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	UNARYLOOP(RELU)

// Kernels of the attention backward (attention_backward_amd64.s).

// func scoreGradsAVX2(dp, pt, dd *float32, rows, cols int)
// dp[r·cols + c] = pt[r·cols + c]·(dp[r·cols + c] − dd[c]).
TEXT ·scoreGradsAVX2(SB), NOSPLIT, $0-40
	MOVQ dp+0(FP), DI
	MOVQ pt+8(FP), SI
	MOVQ rows+24(FP), R8
	MOVQ cols+32(FP), R9

	// Y15: the mask of the last cols%8 columns of every row.
	MOVQ R9, CX
	ANDQ $7, CX
	TAILMASK2(CX, AX, Y15)

sgrow:
	TESTQ R8, R8
	JEQ   sgdone
	MOVQ  dd+16(FP), DX
	MOVQ  R9, CX

sgcol:
	CMPQ    CX, $8
	JLT     sgtail
	VMOVUPS (DI), Y0
	VSUBPS  (DX), Y0, Y0
	VMULPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     sgcol

sgtail:
	TESTQ      CX, CX
	JEQ        sgnext
	VMASKMOVPS (DI), Y15, Y0
	VMASKMOVPS (DX), Y15, Y1
	VMASKMOVPS (SI), Y15, Y2
	VSUBPS     Y1, Y0, Y0
	VMULPS     Y2, Y0, Y0
	VMASKMOVPS Y0, Y15, (DI)
	LEAQ       (DI)(CX*4), DI
	LEAQ       (SI)(CX*4), SI

sgnext:
	DECQ R8
	JMP  sgrow

sgdone:
	VZEROUPPER
	RET

// func dotAVX2(a, b *float32, n int) float32
// Σ a[i]·b[i] in two vector accumulators.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DX
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

dotloop2:
	CMPQ        CX, $16
	JLT         dotloop
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VFMADD231PS (DX), Y2, Y0
	VFMADD231PS 32(DX), Y3, Y1
	ADDQ        $64, SI
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         dotloop2

dotloop:
	CMPQ        CX, $8
	JLT         dottail
	VMOVUPS     (SI), Y2
	VFMADD231PS (DX), Y2, Y0
	ADDQ        $32, SI
	ADDQ        $32, DX
	SUBQ        $8, CX

dottail:
	TESTQ       CX, CX
	JEQ         dotreduce
	TAILMASK2(CX, AX, Y4)
	VMASKMOVPS  (SI), Y4, Y2
	VMASKMOVPS  (DX), Y4, Y3
	VFMADD231PS Y3, Y2, Y1

dotreduce:
	VADDPS Y1, Y0, Y0
	HSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// The convolution's panel gather (conv_panels_amd64.s, which explains
// PFDIST).
#define PFDIST 512

// GATHERRUN(lo, hi) loads one run of a panel (tab entry at AX: {off,
// mask}) under its mask, ORing it into Y0 (lanes 0-7) and, with hi set
// to the macro HIHALF, Y1 (lanes 8-15). The runs of one step have
// disjoint masks and masked-off lanes load as zero, so OR assembles them.
#define LOHALF \
	VPAND      Y14, Y2, Y3; \
	VPCMPEQD   Y14, Y3, Y3; \
	VMASKMOVPS (SI)(R14*4), Y3, Y4; \
	VORPS      Y4, Y0, Y0

#define HIHALF \
	VPAND      Y15, Y2, Y3; \
	VPCMPEQD   Y15, Y3, Y3; \
	VMASKMOVPS 32(SI)(R14*4), Y3, Y4; \
	VORPS      Y4, Y1, Y1

// func gatherPanelAVX2(dst, x *float32, tab *tapRun, runs, plane, ch, tap, steps, kvol, rows int)
//
// gatherPanelAVX512 in two 8-lane halves (the second only for panels of
// more than 8 rows). A step's store is a whole vector, running into the
// next step's lanes, which that step then overwrites; only stores that
// would pass the panel's end are masked (Y12, Y13: the lanes < rows).
TEXT ·gatherPanelAVX2(SB), NOSPLIT, $0-80
	MOVQ    dst+0(FP), DI
	MOVQ    x+8(FP), SI
	MOVQ    tab+16(FP), R8
	MOVQ    runs+24(FP), R11
	MOVQ    plane+32(FP), BX
	SHLQ    $2, BX               // bytes per channel
	MOVQ    ch+40(FP), AX
	IMULQ   BX, AX
	ADDQ    AX, SI               // the channel's input
	MOVQ    tap+48(FP), DX
	MOVQ    steps+56(FP), R9
	MOVQ    kvol+64(FP), R10
	VMOVDQU laneBits<>(SB), Y14
	VMOVDQU laneBits<>+32(SB), Y15

	// Y12: lanes < min(rows, 8); Y13: lanes < rows - 8 (none if negative).
	MOVQ rows+72(FP), AX
	CMPQ AX, $8
	JLE  gplo
	MOVQ $8, AX

gplo:
	TAILMASK2(AX, R13, Y12)
	MOVQ rows+72(FP), AX
	SUBQ $8, AX
	JGE  gphi
	XORQ AX, AX

gphi:
	TAILMASK2(AX, R13, Y13)
	MOVQ  rows+72(FP), R12
	SHLQ  $2, R12                // bytes per step of dst
	MOVQ  R12, AX
	IMULQ R9, AX
	LEAQ  (DI)(AX*1), CX         // the panel's end
	MOVQ  DX, AX
	IMULQ R11, AX
	SHLQ  $4, AX
	ADDQ  R8, AX                 // the tap's first run
	CMPQ  R12, $32
	JGT   wstep

// nstep: panels of at most 8 lanes. A step's first run's masked load is
// the step (its masked-off lanes load as zero), and any further runs (a
// panel crossing an output row: about one in (output width)/rows) are
// ORed in out of line, so a one-run step takes one taken branch. Clearing
// Y0 and ORing every run in a loop took five a step: 2.9 ns a step on
// input in L1 on Zen 3, against 1.4 now.
nstep:
	TESTQ R9, R9
	JEQ   gpdone

nload:
	MOVQ         (AX), R14
	VPBROADCASTD 8(AX), Y2
	VPAND        Y14, Y2, Y3
	VPCMPEQD     Y14, Y3, Y3
	VMASKMOVPS   (SI)(R14*4), Y3, Y0
	PREFETCHT1   PFDIST(SI)(R14*4)
	ADDQ         $16, AX
	LEAQ         -1(R11), R13 // the step's other runs
	TESTQ        R13, R13
	JNE          nrun

nstore:
	LEAQ    32(DI), R13
	CMPQ    R13, CX
	JGT     nmasked
	VMOVUPS Y0, (DI)

nnext:
	ADDQ R12, DI
	INCQ DX
	CMPQ DX, R10
	JEQ  nwrap

nadv:
	DECQ R9
	JNZ  nload
	VZEROUPPER
	RET

nrun:
	MOVQ         (AX), R14
	VPBROADCASTD 8(AX), Y2
	LOHALF
	PREFETCHT1   PFDIST(SI)(R14*4)
	ADDQ         $16, AX
	DECQ         R13
	JNE          nrun
	JMP          nstore

nmasked:
	VMASKMOVPS Y0, Y12, (DI)
	JMP        nnext

nwrap:
	XORQ DX, DX // the next channel's first tap
	MOVQ R8, AX
	ADDQ BX, SI
	JMP  nadv

wstep:
	TESTQ  R9, R9
	JEQ    gpdone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ   R11, R13

wrun:
	TESTQ        R13, R13
	JEQ          wstore
	MOVQ         (AX), R14
	VPBROADCASTD 8(AX), Y2
	LOHALF
	HIHALF
	PREFETCHT1   PFDIST(SI)(R14*4)
	ADDQ         $16, AX
	DECQ         R13
	JMP          wrun

wstore:
	LEAQ       64(DI), R13
	CMPQ       R13, CX
	JGT        wmasked
	VMOVUPS    Y0, (DI)
	VMOVUPS    Y1, 32(DI)
	JMP        wnext

wmasked:
	VMASKMOVPS Y0, Y12, (DI)
	VMASKMOVPS Y1, Y13, 32(DI)

wnext:
	ADDQ R12, DI
	INCQ DX
	CMPQ DX, R10
	JLT  wadv
	XORQ DX, DX
	MOVQ R8, AX
	ADDQ BX, SI

wadv:
	DECQ R9
	JMP  wstep

gpdone:
	VZEROUPPER
	RET

// expLo: -104, in every lane.
DATA expLo<>+0(SB)/4, $0xc2d00000
DATA expLo<>+4(SB)/4, $0xc2d00000
DATA expLo<>+8(SB)/4, $0xc2d00000
DATA expLo<>+12(SB)/4, $0xc2d00000
DATA expLo<>+16(SB)/4, $0xc2d00000
DATA expLo<>+20(SB)/4, $0xc2d00000
DATA expLo<>+24(SB)/4, $0xc2d00000
DATA expLo<>+28(SB)/4, $0xc2d00000
GLOBL expLo<>(SB), RODATA|NOPTR, $32

// expHi: 89, in every lane.
DATA expHi<>+0(SB)/4, $0x42b20000
DATA expHi<>+4(SB)/4, $0x42b20000
DATA expHi<>+8(SB)/4, $0x42b20000
DATA expHi<>+12(SB)/4, $0x42b20000
DATA expHi<>+16(SB)/4, $0x42b20000
DATA expHi<>+20(SB)/4, $0x42b20000
DATA expHi<>+24(SB)/4, $0x42b20000
DATA expHi<>+28(SB)/4, $0x42b20000
GLOBL expHi<>(SB), RODATA|NOPTR, $32

// log2e: log2 e, in every lane.
DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32

// ln2hi: ln2, high part (exact times any n here), in every lane.
DATA ln2hi<>+0(SB)/4, $0x3f317200
DATA ln2hi<>+4(SB)/4, $0x3f317200
DATA ln2hi<>+8(SB)/4, $0x3f317200
DATA ln2hi<>+12(SB)/4, $0x3f317200
DATA ln2hi<>+16(SB)/4, $0x3f317200
DATA ln2hi<>+20(SB)/4, $0x3f317200
DATA ln2hi<>+24(SB)/4, $0x3f317200
DATA ln2hi<>+28(SB)/4, $0x3f317200
GLOBL ln2hi<>(SB), RODATA|NOPTR, $32

// ln2lo: ln2, low part, in every lane.
DATA ln2lo<>+0(SB)/4, $0x35bfbe8e
DATA ln2lo<>+4(SB)/4, $0x35bfbe8e
DATA ln2lo<>+8(SB)/4, $0x35bfbe8e
DATA ln2lo<>+12(SB)/4, $0x35bfbe8e
DATA ln2lo<>+16(SB)/4, $0x35bfbe8e
DATA ln2lo<>+20(SB)/4, $0x35bfbe8e
DATA ln2lo<>+24(SB)/4, $0x35bfbe8e
DATA ln2lo<>+28(SB)/4, $0x35bfbe8e
GLOBL ln2lo<>(SB), RODATA|NOPTR, $32

// expC7: 1/7!, in every lane.
DATA expC7<>+0(SB)/4, $0x39500d01
DATA expC7<>+4(SB)/4, $0x39500d01
DATA expC7<>+8(SB)/4, $0x39500d01
DATA expC7<>+12(SB)/4, $0x39500d01
DATA expC7<>+16(SB)/4, $0x39500d01
DATA expC7<>+20(SB)/4, $0x39500d01
DATA expC7<>+24(SB)/4, $0x39500d01
DATA expC7<>+28(SB)/4, $0x39500d01
GLOBL expC7<>(SB), RODATA|NOPTR, $32

// expC6: 1/6!, in every lane.
DATA expC6<>+0(SB)/4, $0x3ab60b61
DATA expC6<>+4(SB)/4, $0x3ab60b61
DATA expC6<>+8(SB)/4, $0x3ab60b61
DATA expC6<>+12(SB)/4, $0x3ab60b61
DATA expC6<>+16(SB)/4, $0x3ab60b61
DATA expC6<>+20(SB)/4, $0x3ab60b61
DATA expC6<>+24(SB)/4, $0x3ab60b61
DATA expC6<>+28(SB)/4, $0x3ab60b61
GLOBL expC6<>(SB), RODATA|NOPTR, $32

// expC5: 1/5!, in every lane.
DATA expC5<>+0(SB)/4, $0x3c088889
DATA expC5<>+4(SB)/4, $0x3c088889
DATA expC5<>+8(SB)/4, $0x3c088889
DATA expC5<>+12(SB)/4, $0x3c088889
DATA expC5<>+16(SB)/4, $0x3c088889
DATA expC5<>+20(SB)/4, $0x3c088889
DATA expC5<>+24(SB)/4, $0x3c088889
DATA expC5<>+28(SB)/4, $0x3c088889
GLOBL expC5<>(SB), RODATA|NOPTR, $32

// expC4: 1/4!, in every lane.
DATA expC4<>+0(SB)/4, $0x3d2aaaab
DATA expC4<>+4(SB)/4, $0x3d2aaaab
DATA expC4<>+8(SB)/4, $0x3d2aaaab
DATA expC4<>+12(SB)/4, $0x3d2aaaab
DATA expC4<>+16(SB)/4, $0x3d2aaaab
DATA expC4<>+20(SB)/4, $0x3d2aaaab
DATA expC4<>+24(SB)/4, $0x3d2aaaab
DATA expC4<>+28(SB)/4, $0x3d2aaaab
GLOBL expC4<>(SB), RODATA|NOPTR, $32

// expC3: 1/3!, in every lane.
DATA expC3<>+0(SB)/4, $0x3e2aaaab
DATA expC3<>+4(SB)/4, $0x3e2aaaab
DATA expC3<>+8(SB)/4, $0x3e2aaaab
DATA expC3<>+12(SB)/4, $0x3e2aaaab
DATA expC3<>+16(SB)/4, $0x3e2aaaab
DATA expC3<>+20(SB)/4, $0x3e2aaaab
DATA expC3<>+24(SB)/4, $0x3e2aaaab
DATA expC3<>+28(SB)/4, $0x3e2aaaab
GLOBL expC3<>(SB), RODATA|NOPTR, $32

// expC2: 1/2!, in every lane.
DATA expC2<>+0(SB)/4, $0x3f000000
DATA expC2<>+4(SB)/4, $0x3f000000
DATA expC2<>+8(SB)/4, $0x3f000000
DATA expC2<>+12(SB)/4, $0x3f000000
DATA expC2<>+16(SB)/4, $0x3f000000
DATA expC2<>+20(SB)/4, $0x3f000000
DATA expC2<>+24(SB)/4, $0x3f000000
DATA expC2<>+28(SB)/4, $0x3f000000
GLOBL expC2<>(SB), RODATA|NOPTR, $32

// one: 1 (= 1/1! = 1/0!), in every lane.
DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32

// expBias: the float32 exponent bias, an integer, in every lane.
DATA expBias<>+0(SB)/4, $0x7f
DATA expBias<>+4(SB)/4, $0x7f
DATA expBias<>+8(SB)/4, $0x7f
DATA expBias<>+12(SB)/4, $0x7f
DATA expBias<>+16(SB)/4, $0x7f
DATA expBias<>+20(SB)/4, $0x7f
DATA expBias<>+24(SB)/4, $0x7f
DATA expBias<>+28(SB)/4, $0x7f
GLOBL expBias<>(SB), RODATA|NOPTR, $32

// signBit: the sign bit, in every lane.
DATA signBit<>+0(SB)/4, $0x80000000
DATA signBit<>+4(SB)/4, $0x80000000
DATA signBit<>+8(SB)/4, $0x80000000
DATA signBit<>+12(SB)/4, $0x80000000
DATA signBit<>+16(SB)/4, $0x80000000
DATA signBit<>+20(SB)/4, $0x80000000
DATA signBit<>+24(SB)/4, $0x80000000
DATA signBit<>+28(SB)/4, $0x80000000
GLOBL signBit<>(SB), RODATA|NOPTR, $32

// geluA: 0.044715, in every lane.
DATA geluA<>+0(SB)/4, $0x3d372713
DATA geluA<>+4(SB)/4, $0x3d372713
DATA geluA<>+8(SB)/4, $0x3d372713
DATA geluA<>+12(SB)/4, $0x3d372713
DATA geluA<>+16(SB)/4, $0x3d372713
DATA geluA<>+20(SB)/4, $0x3d372713
DATA geluA<>+24(SB)/4, $0x3d372713
DATA geluA<>+28(SB)/4, $0x3d372713
GLOBL geluA<>(SB), RODATA|NOPTR, $32

// geluB: 2·√(2/π), in every lane.
DATA geluB<>+0(SB)/4, $0x3fcc422a
DATA geluB<>+4(SB)/4, $0x3fcc422a
DATA geluB<>+8(SB)/4, $0x3fcc422a
DATA geluB<>+12(SB)/4, $0x3fcc422a
DATA geluB<>+16(SB)/4, $0x3fcc422a
DATA geluB<>+20(SB)/4, $0x3fcc422a
DATA geluB<>+24(SB)/4, $0x3fcc422a
DATA geluB<>+28(SB)/4, $0x3fcc422a
GLOBL geluB<>(SB), RODATA|NOPTR, $32

// tailMask: 8 lanes of ones, then 8 of zeros. The 8 lanes starting at
// element 8-n have the low n set: the mask of an n-element tail.
DATA tailMask<>+0(SB)/4, $0xffffffff
DATA tailMask<>+4(SB)/4, $0xffffffff
DATA tailMask<>+8(SB)/4, $0xffffffff
DATA tailMask<>+12(SB)/4, $0xffffffff
DATA tailMask<>+16(SB)/4, $0xffffffff
DATA tailMask<>+20(SB)/4, $0xffffffff
DATA tailMask<>+24(SB)/4, $0xffffffff
DATA tailMask<>+28(SB)/4, $0xffffffff
DATA tailMask<>+32(SB)/4, $0x00000000
DATA tailMask<>+36(SB)/4, $0x00000000
DATA tailMask<>+40(SB)/4, $0x00000000
DATA tailMask<>+44(SB)/4, $0x00000000
DATA tailMask<>+48(SB)/4, $0x00000000
DATA tailMask<>+52(SB)/4, $0x00000000
DATA tailMask<>+56(SB)/4, $0x00000000
DATA tailMask<>+60(SB)/4, $0x00000000
GLOBL tailMask<>(SB), RODATA|NOPTR, $64

// laneBits: bit j in lane j, for j = 0..15: a panel run's 16-bit mask
// ANDed with them and compared gives the vector masks of its two halves.
DATA laneBits<>+0(SB)/4, $0x1
DATA laneBits<>+4(SB)/4, $0x2
DATA laneBits<>+8(SB)/4, $0x4
DATA laneBits<>+12(SB)/4, $0x8
DATA laneBits<>+16(SB)/4, $0x10
DATA laneBits<>+20(SB)/4, $0x20
DATA laneBits<>+24(SB)/4, $0x40
DATA laneBits<>+28(SB)/4, $0x80
DATA laneBits<>+32(SB)/4, $0x100
DATA laneBits<>+36(SB)/4, $0x200
DATA laneBits<>+40(SB)/4, $0x400
DATA laneBits<>+44(SB)/4, $0x800
DATA laneBits<>+48(SB)/4, $0x1000
DATA laneBits<>+52(SB)/4, $0x2000
DATA laneBits<>+56(SB)/4, $0x4000
DATA laneBits<>+60(SB)/4, $0x8000
GLOBL laneBits<>(SB), RODATA|NOPTR, $64

// erfP: the coefficients c0..c9 of GELUERF's fit; erfK = 1/(2√2); erfHalf = 0.5;
// erfMax = 16, the clamp of |x|.
DATA erfP<>+0(SB)/4, $0xbfa1fc4e
DATA erfP<>+4(SB)/4, $0x3f8000c7
DATA erfP<>+8(SB)/4, $0x3ebf88fb
DATA erfP<>+12(SB)/4, $0x3dc636c9
DATA erfP<>+16(SB)/4, $0xbe3ec24c
DATA erfP<>+20(SB)/4, $0x3e8ec7cc
DATA erfP<>+24(SB)/4, $0xbf914e5d
DATA erfP<>+28(SB)/4, $0x3fbe87b0
DATA erfP<>+32(SB)/4, $0xbf527892
DATA erfP<>+36(SB)/4, $0x3e2ef945
GLOBL erfP<>(SB), RODATA|NOPTR, $40
DATA erfK<>+0(SB)/4, $0x3eb504f3
GLOBL erfK<>(SB), RODATA|NOPTR, $4
DATA erfHalf<>+0(SB)/4, $0x3f000000
GLOBL erfHalf<>(SB), RODATA|NOPTR, $4
DATA erfMax<>+0(SB)/4, $0x41800000
GLOBL erfMax<>(SB), RODATA|NOPTR, $4
