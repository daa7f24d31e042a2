//go:build linux || freebsd

package hwprofile

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache asks the kernel to forget the file's clean pages.
func dropCache(f *os.File, n int64) error {
	return unix.Fadvise(int(f.Fd()), 0, n, unix.FADV_DONTNEED)
}
