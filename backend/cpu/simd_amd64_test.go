package cpu

func hasAVX512Kernels() bool { return hasAVX512 }
