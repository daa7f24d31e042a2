//go:build !amd64

package cpu

func hasAVX512Kernels() bool { return false }
