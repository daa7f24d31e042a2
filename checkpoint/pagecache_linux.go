package checkpoint

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageCacheBytes maps the file without touching it and asks the kernel
// (mincore) which of its pages are resident in the page cache.
func pageCacheBytes(f *os.File, size int64) (int64, error) {
	if size == 0 {
		return 0, nil
	}
	b, err := mapFile(f, size)
	if err != nil {
		return 0, err
	}
	defer unmapFile(b)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	// x/sys has no wrapper for mincore(2).
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, errno
	}
	var n int64
	for i, v := range vec {
		if v&1 == 0 {
			continue
		}
		n += min(page, size-int64(i)*page)
	}
	return n, nil
}
