//go:build !amd64

package cpu

// detectedISA: only the Go kernels exist outside amd64.
func detectedISA() isaLevel { return isaGeneric }

func installArchKernels(isaLevel) {}
