//go:build unix

package checkpoint

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the whole file read-only. MAP_SHARED: the pages are the page
// cache's, so mapping costs no copy and dropping them frees real memory.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, fmt.Errorf("file of %d bytes is too large to map on this platform", size)
	}
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

func unmapFile(b []byte) error { return unix.Munmap(b) }

// adviseDontNeed drops the mapping's pages in b (page-aligned) from this
// process. The mapping is read-only and file-backed, so a later access just
// faults the data back in from the file.
func adviseDontNeed(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Madvise(b, unix.MADV_DONTNEED)
}
