#include "textflag.h"

// The expanding packers: n stored weights (n a multiple of 16) widened to
// float32, in order, src and dst contiguous. AVX2 + F16C; callers check.
// Each widening is exact (the E4M3 one up to a factor 2⁻⁸, see expand.go).

// func expandBF16AVX2(dst *float32, src *uint16, n int)
//
// bf16 is the upper half of a float32: zero-extend to 32 bits, shift left.
TEXT ·expandBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ  bf16done

bf16loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNE       bf16loop

bf16done:
	VZEROUPPER
	RET

// func expandF16AVX2(dst *float32, src *uint16, n int)
TEXT ·expandF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ  f16done

f16loop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNE       f16loop

f16done:
	VZEROUPPER
	RET

// func expandE5M2AVX2(dst *float32, src *uint8, n int)
//
// E5M2 is the upper byte of an IEEE half: zero-extend to 16 bits, shift
// left 8, convert the halves.
TEXT ·expandE5M2AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ  e5done

e5loop:
	VPMOVZXBW (SI), X0
	VPMOVZXBW 8(SI), X1
	VPSLLW    $8, X0, X0
	VPSLLW    $8, X1, X1
	VCVTPH2PS X0, Y0
	VCVTPH2PS X1, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	DECQ      CX
	JNE       e5loop

e5done:
	VZEROUPPER
	RET

// func expandE4M3AVX2(dst *float32, src *uint8, n int)
//
// E4M3 s.eeee.mmm becomes the half s.0eeee.mmm0000000, whose value is the
// E4M3 value times 2⁻⁸ for normals and subnormals alike (both formats
// place the binary point the same way; the half's bias is 8 more): half =
// (x<<7 & 0x3f80) | (x<<8 & 0x8000).
TEXT ·expandE4M3AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JEQ  e4done
	MOVL         $0x3f803f80, AX
	MOVD         AX, X14
	VPBROADCASTD X14, X14
	MOVL         $0x80008000, AX
	MOVD         AX, X15
	VPBROADCASTD X15, X15

e4loop:
	VPMOVZXBW (SI), X0
	VPMOVZXBW 8(SI), X1
	VPSLLW    $7, X0, X2
	VPSLLW    $7, X1, X3
	VPSLLW    $8, X0, X0
	VPSLLW    $8, X1, X1
	VPAND     X14, X2, X2
	VPAND     X14, X3, X3
	VPAND     X15, X0, X0
	VPAND     X15, X1, X1
	VPOR      X2, X0, X0
	VPOR      X3, X1, X1
	VCVTPH2PS X0, Y0
	VCVTPH2PS X1, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	DECQ      CX
	JNE       e4loop

e4done:
	VZEROUPPER
	RET
