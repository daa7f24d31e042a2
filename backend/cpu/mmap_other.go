//go:build !unix

package cpu

// HugePages is false: transparent huge pages are asked for on Linux only.
var HugePages = false

// mapAnon falls back to the Go heap where anonymous mmap is unavailable; the
// accounting is the same.
func mapAnon(size int64) ([]byte, error) { return make([]byte, size), nil }

func unmap([]byte) {}

// mapSmall is mapAnon.
func mapSmall(size int64) ([]byte, error) { return mapAnon(size) }
