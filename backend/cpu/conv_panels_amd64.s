#include "textflag.h"

// PFDIST: each run also prefetches (into L2) the input 128 floats further
// along its row, which the panels of the GEMM's next row block read: the
// input of a full-resolution convolution does not fit in the caches, and
// its runs, one per channel and tap, are too many streams for the hardware
// prefetcher. (512 was 6% faster on the VAE decoder than none, 1024 no
// better.)
#define PFDIST 512

// func gatherPanelAVX512(dst, x *float32, tab *tapRun, runs, plane, ch, tap, steps, kvol, rows int)
//
// For each of steps K steps, from channel ch and kernel tap tap on: start
// from zero, load each of the tap's runs (tab: runs {off, mask} pairs per
// tap, 16 bytes each) under its mask from the channel's input at off, and
// store the rows lanes at dst. Masked-off lanes are never read, so a run
// may start before the channel or end past it.
TEXT ·gatherPanelAVX512(SB), NOSPLIT, $0-80
	MOVQ  dst+0(FP), DI
	MOVQ  x+8(FP), SI
	MOVQ  tab+16(FP), R8
	MOVQ  runs+24(FP), R11
	MOVQ  plane+32(FP), BX
	SHLQ  $2, BX               // bytes per channel
	MOVQ  ch+40(FP), AX
	IMULQ BX, AX
	ADDQ  AX, SI               // the channel's input
	MOVQ  tap+48(FP), DX
	MOVQ  steps+56(FP), R9
	MOVQ  kvol+64(FP), R10
	MOVQ  rows+72(FP), CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K2               // the panel's lanes
	SHLQ  $2, CX
	MOVQ  CX, R12              // bytes per step of dst
	MOVQ  DX, AX
	IMULQ R11, AX
	SHLQ  $4, AX
	ADDQ  R8, AX               // the tap's first run

step:
	TESTQ  R9, R9
	JEQ    done
	VPXORD Z0, Z0, Z0
	MOVQ   R11, R13

run:
	TESTQ   R13, R13
	JEQ     store
	MOVQ    (AX), R14
	KMOVW   8(AX), K1
	VMOVUPS (SI)(R14*4), K1, Z0
	PREFETCHT1 PFDIST(SI)(R14*4)
	ADDQ    $16, AX
	DECQ    R13
	JMP     run

store:
	VMOVUPS Z0, K2, (DI)
	ADDQ    R12, DI
	INCQ    DX
	CMPQ    DX, R10
	JLT     next
	XORQ    DX, DX             // the next channel's first tap
	MOVQ    R8, AX
	ADDQ    BX, SI

next:
	DECQ R9
	JMP  step

done:
	VZEROUPPER
	RET
