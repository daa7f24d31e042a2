#include "textflag.h"

// AVX2 versions of the float64 row kernels (rows_f64.go): four floats
// widened to float64 at a time (VCVTPS2PD), whole groups of four only; the
// Go wrappers (rows_f64_amd64.go) finish the rest with the Go versions.
// They run on every CPU with AVX2, AVX-512 ones included.

// func sumF64AVX2(x *float32, n int) float64
TEXT ·sumF64AVX2(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1

sumloop2:
	CMPQ      CX, $8
	JLT       sumloop
	VCVTPS2PD (SI), Y2
	VCVTPS2PD 16(SI), Y3
	VADDPD    Y2, Y0, Y0
	VADDPD    Y3, Y1, Y1
	ADDQ      $32, SI
	SUBQ      $8, CX
	JMP       sumloop2

sumloop:
	CMPQ      CX, $4
	JLT       sumreduce
	VCVTPS2PD (SI), Y2
	VADDPD    Y2, Y0, Y0

sumreduce:
	VADDPD       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VPERMILPD    $1, X0, X1
	VADDSD       X1, X0, X0
	VMOVSD       X0, ret+16(FP)
	VZEROUPPER
	RET

// func sqDevF64AVX2(x *float32, n int, mean float64) float64
TEXT ·sqDevF64AVX2(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD mean+16(FP), Y4
	VXORPD       Y0, Y0, Y0
	VXORPD       Y1, Y1, Y1

sqloop2:
	CMPQ        CX, $8
	JLT         sqloop
	VCVTPS2PD   (SI), Y2
	VCVTPS2PD   16(SI), Y3
	VSUBPD      Y4, Y2, Y2
	VSUBPD      Y4, Y3, Y3
	VFMADD231PD Y2, Y2, Y0
	VFMADD231PD Y3, Y3, Y1
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         sqloop2

sqloop:
	CMPQ        CX, $4
	JLT         sqreduce
	VCVTPS2PD   (SI), Y2
	VSUBPD      Y4, Y2, Y2
	VFMADD231PD Y2, Y2, Y0

sqreduce:
	VADDPD       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VPERMILPD    $1, X0, X1
	VADDSD       X1, X0, X0
	VMOVSD       X0, ret+24(FP)
	VZEROUPPER
	RET

// func normRowAVX2(d, x, w, b *float32, n int, mean, scale, shift float64, mode int)
//
// d[i] = float32(((x[i] - mean)·scale)·w[i] + b[i] + shift), with ·w[i]
// only for mode bit 0, + b[i] for bit 1, + shift for bit 2: the order of
// normRowGo's expressions, unfused, so that every result is the same.
TEXT ·normRowAVX2(SB), NOSPLIT, $0-72
	MOVQ         d+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), R8
	MOVQ         b+24(FP), R9
	MOVQ         n+32(FP), CX
	VBROADCASTSD mean+40(FP), Y13
	VBROADCASTSD scale+48(FP), Y14
	VBROADCASTSD shift+56(FP), Y15
	MOVQ         mode+64(FP), DX

nrloop:
	CMPQ      CX, $4
	JLT       nrdone
	VCVTPS2PD (SI), Y0
	VSUBPD    Y13, Y0, Y0
	VMULPD    Y14, Y0, Y0
	TESTQ     $1, DX
	JEQ       nrnow
	VCVTPS2PD (R8), Y1
	VMULPD    Y1, Y0, Y0
	ADDQ      $16, R8

nrnow:
	TESTQ     $2, DX
	JEQ       nrnob
	VCVTPS2PD (R9), Y1
	VADDPD    Y1, Y0, Y0
	ADDQ      $16, R9

nrnob:
	TESTQ  $4, DX
	JEQ    nrstore
	VADDPD Y15, Y0, Y0

nrstore:
	VCVTPD2PSY Y0, X0
	VMOVUPS    X0, (DI)
	ADDQ       $16, SI
	ADDQ       $16, DI
	SUBQ       $4, CX
	JMP        nrloop

nrdone:
	VZEROUPPER
	RET

// func ropeAVX2(d, x *float32, c, s *float64, pairs int)
//
// Two pairs at a time (pairs even): with x = [x0 x1 x0' x1'] widened,
// x·[c c c' c'] + [x1 x0 x1' x0']·[-s s -s' s'] is
// [x0·c - x1·s, x1·c + x0·s, ...], ropeRowGo's products and sums exactly.
TEXT ·ropeAVX2(SB), NOSPLIT, $0-40
	MOVQ    d+0(FP), DI
	MOVQ    x+8(FP), SI
	MOVQ    c+16(FP), R8
	MOVQ    s+24(FP), R9
	MOVQ    pairs+32(FP), CX
	VMOVUPD ropeSign<>(SB), Y15

ropeloop:
	CMPQ       CX, $2
	JLT        ropedone
	VCVTPS2PD  (SI), Y0
	VPERMILPD  $5, Y0, Y1
	VMOVUPD    (R8), X2
	VPERMPD    $0x50, Y2, Y2
	VMOVUPD    (R9), X3
	VPERMPD    $0x50, Y3, Y3
	VXORPD     Y15, Y3, Y3
	VMULPD     Y2, Y0, Y0
	VMULPD     Y3, Y1, Y1
	VADDPD     Y1, Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS    X0, (DI)
	ADDQ       $16, SI
	ADDQ       $16, DI
	ADDQ       $16, R8
	ADDQ       $16, R9
	SUBQ       $2, CX
	JMP        ropeloop

ropedone:
	VZEROUPPER
	RET

// ropeSign: the float64 sign bit in lanes 0 and 2.
DATA ropeSign<>+0(SB)/8, $0x8000000000000000
DATA ropeSign<>+8(SB)/8, $0
DATA ropeSign<>+16(SB)/8, $0x8000000000000000
DATA ropeSign<>+24(SB)/8, $0
GLOBL ropeSign<>(SB), RODATA|NOPTR, $32
