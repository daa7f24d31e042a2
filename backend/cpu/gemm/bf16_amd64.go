//go:build amd64

package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// avx512BF16Kernel: the 14×32 tile of the fp32 AVX-512 kernel over bf16
// pairs. kc = 256 pairs keeps the B micro-panel at 32 KiB (L1 is 48 KiB);
// the A block (mc·kc words, 168 KiB) sits in L2; the B block (nc·kc words,
// 4 MiB) in L3.
var avx512BF16Kernel = &bf16Kernel{
	name: "avx512bf16", mr: 14, nr: 32,
	byRows: bf16gemmAVX512Kernels[:],
	kc:     256, mc: 168, nc: 4096,
}

// archBF16Kernels lists the assembly bf16 kernels the CPU runs: VDPBF16PS
// needs AVX512-BF16 (x/sys/cpu reports it only when the OS saves the zmm
// state), and FERRY_CPU=avx2 hides it.
func archBF16Kernels() []*bf16Kernel {
	if hasAVX512() && cpu.X86.HasAVX512BF16 {
		return []*bf16Kernel{avx512BF16Kernel}
	}
	return nil
}

// transposeWeightWords packs whole 16-pair steps of a weight panel with the
// AVX-512 transpose (the weight viewed as 32-bit words, row stride ld
// words) and returns how many pair steps it packed; 0 without AVX-512 (or
// with FERRY_CPU=avx2).
func transposeWeightWords(panel []uint32, nr int, w []uint16, ld, j0, cols, pc, kc int) int {
	if !hasAVX512() || nr%16 != 0 {
		return 0
	}
	words := unsafe.Slice((*uint32)(unsafe.Pointer(&w[0])), len(w)/2)
	p := 0
	for ; p+16 <= kc; p += 16 {
		for g := 0; g < nr; g += 16 {
			n := min(16, cols-g)
			dst := panel[p*nr+g : (p+15)*nr+g+16]
			if n <= 0 {
				for i := range 16 {
					clear(dst[i*nr : i*nr+16])
				}
				continue
			}
			src := words[(j0+g)*ld+pc+p : (j0+g+n-1)*ld+pc+p+16]
			transpose16((*float32)(unsafe.Pointer(&dst[0])), nr, (*float32)(unsafe.Pointer(&src[0])), ld, n, 0xffff)
		}
	}
	return p
}
