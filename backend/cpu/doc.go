// Package cpu is the CPU backend: a Device whose memory is mmap'd outside the
// Go heap behind a caching allocator with a hard capacity, and the kernels of
// tensor.Backend (GEMM through OpenBLAS or our own kernels, attention in
// tiles, norms, convolutions), all run on one shared thread pool.
package cpu
