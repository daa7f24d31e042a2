//go:build !linux && !darwin

package gemm

import (
	"errors"
	"runtime"
)

// OpenBLAS is loaded only on Linux and macOS (purego's dlopen without cgo;
// its FreeBSD support needs cgo).
func OpenBLAS() (Impl, error) {
	return nil, errors.New("gemm: openblas loading not supported on " + runtime.GOOS)
}

// OpenBLASInfo reports that OpenBLAS is not loadable.
func OpenBLASInfo() (BLASInfo, error) {
	_, err := OpenBLAS()
	return BLASInfo{}, err
}
