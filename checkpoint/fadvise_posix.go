//go:build linux || freebsd

package checkpoint

import (
	"os"

	"golang.org/x/sys/unix"
)

// fadviseDontNeed asks the kernel to evict the file's clean pages in
// [off, off+n) from the page cache.
func fadviseDontNeed(f *os.File, off, n int64) error {
	return unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
