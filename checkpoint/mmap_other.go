//go:build !unix

package checkpoint

import "os"

// mapFile emulates a mapping by reading the whole file into memory, for
// platforms without mmap in golang.org/x/sys/unix.
func mapFile(f *os.File, size int64) ([]byte, error) { return readWhole(f, size) }

func unmapFile([]byte) error { return nil }

func adviseDontNeed([]byte) error { return nil }

func fadviseDontNeed(*os.File, int64, int64) error { return nil }
