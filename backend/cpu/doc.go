// Package cpu is the CPU backend: a Device whose memory is mmap'd outside the
// Go heap behind a caching allocator with a hard capacity, and the kernels of
// tensor.Backend (GEMM through OpenBLAS or our own kernels, attention in
// tiles, norms, convolutions), all run on one shared thread pool.
//
// # Instruction sets
//
// The kernels besides the GEMM (the online softmax of attention and its
// backward, the convolution's panel gather, the channel RMSNorm, softmax
// and the elementwise exp, sigmoid, SiLU, GELU and ReLU) have three
// versions: AVX-512 assembly, AVX2 + FMA assembly, and portable Go. At
// start-up the package installs the best the CPU and OS support
// (KernelISA names it). The AVX2 ones compute the same results as the
// AVX-512 ones, bit for bit for the elementwise functions. The norms'
// float64 statistics and scaling and RoPE's rotation have an AVX2 version
// only, which AVX-512 CPUs run too (rows_f64.go).
//
// FERRY_CPU caps that choice, read once at start-up:
//
//	FERRY_CPU=avx2     the AVX2 kernels even where AVX-512 exists
//	FERRY_CPU=generic  the portable Go kernels
//	FERRY_CPU=avx512   (or unset, or auto) the best the CPU has
//
// so that an AVX-512 machine runs, tests and measures what an AVX2-only
// one (Intel client chips since Alder Lake, AMD before Zen 4) runs. The
// GEMM (package gemm) reads the same variable and caps its kernels alike,
// and the hardware profile records the level its figures were measured
// with. An unknown value caps nothing; ISAWarning says so in one line.
package cpu
