//go:build unix && !linux

package cpu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// HugePages is false: transparent huge pages are asked for on Linux only.
var HugePages = false

// mapAnon maps size bytes of private anonymous memory, outside the Go heap.
func mapAnon(size int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

func unmap(b []byte) { _ = unix.Munmap(b) }

// mapSmall is mapAnon: there is no huge-page advice to leave out.
func mapSmall(size int64) ([]byte, error) { return mapAnon(size) }
