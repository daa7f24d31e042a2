package checkpoint

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages maps the file without touching it and asks the kernel
// (mincore) which of its pages are resident in the page cache: bit 0 of
// entry i is set when page i is.
func residentPages(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	b, err := mapFile(f, size)
	if err != nil {
		return nil, err
	}
	defer unmapFile(b)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	// x/sys has no wrapper for mincore(2).
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return nil, errno
	}
	return vec, nil
}
