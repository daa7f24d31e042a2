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

// avx2Kernel: 6×16 tiles, 12 ymm accumulators (the classic Haswell shape).
var avx2Kernel = &kernel{
	name: "avx2", mr: 6, nr: 16,
	byRows: sgemmAVX2Kernels[:],
	kc:     256, mc: 144, nc: 4096, streamRows: 256,
}

// archKernels lists the assembly kernels the CPU and OS support, best
// first. x/sys/cpu reports AVX-512 only when the OS saves the zmm state.
func archKernels() []*kernel {
	var ks []*kernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return ks
}
