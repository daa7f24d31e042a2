//go:build amd64

package gemm

import "golang.org/x/sys/cpu"

// avx512Kernel: 14×32 tiles, 28 zmm accumulators, two B vectors and two
// registers the A values are broadcast into in turn. mr and nr must match
// internal/kerngen.
var avx512Kernel = &kernel{
	name: "avx512", mr: 14, nr: 32,
	byRows: sgemmAVX512Kernels[:], masked: true, transpose: true,
	kc: 512, mc: 98, nc: 4096, streamRows: 256,
}

// avx2Kernel: 6×16 tiles, 12 ymm accumulators (the classic Haswell shape),
// K blocked for the core's L1 (avx2KC).
var avx2Kernel = &kernel{
	name: "avx2", mr: 6, nr: 16,
	byRows: sgemmAVX2Kernels[:], copyRows8: true, transpose8: true,
	kc: avx2KC(l1DataBytes()), mc: 144, nc: 4096, streamRows: 256,
}

// avx2KC is the AVX2 kernel's K block for an L1 data cache of l1 bytes:
// the largest multiple of 128 steps, from 256 to 512, for which a B panel
// (16 floats a step) and the A strip sweeping it (6 a step) fit in L1
// together. A 32 KiB L1 (Zen 2 to 4, Skylake) gets 256, BLIS's block
// there; a 48 KiB one (Zen 5, Intel's cores since Ice Lake) 512,
// which on the Zen 5 kind ran the AVX2 kernel 0.99-1.08x kc=256's rate,
// its 8192-row products 1.05-1.08x: a C tile is then read and written
// half as often. 256 where CPUID does not say (l1DataBytes).
func avx2KC(l1 int) int {
	kc := l1 / (4 * (16 + 6)) / 128 * 128
	return min(max(kc, 256), 512)
}

// hasAVX512 says whether the AVX-512 kernels may run: the CPU and OS
// support them (x/sys/cpu reports AVX-512 only when the OS saves the zmm
// state) and FERRY_CPU does not cap them off.
func hasAVX512() bool { return cpu.X86.HasAVX512F && allows(ISAAVX512) }

// hasAVX2 says whether the AVX2 + FMA kernels may run.
func hasAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && allows(ISAAVX2) }

// hasExpand says whether the vectorised expanding packers may run: AVX2
// for the integer widening, F16C for VCVTPH2PS.
func hasExpand() bool { return hasAVX2() && cpu.X86.HasF16C }

// archKernels lists the assembly kernels the CPU, the OS and FERRY_CPU
// allow, best first.
func archKernels() []*kernel {
	var ks []*kernel
	if hasAVX512() {
		ks = append(ks, avx512Kernel)
	}
	if hasAVX2() {
		ks = append(ks, avx2Kernel)
	}
	return ks
}
