package cpu

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on x86-64 and arm64 (4 KiB
// base pages).
const hugePage = 2 << 20

// HugePages reports whether device memory asks the kernel for transparent
// huge pages. A 2 MiB page is one fault where 512 small pages are 512, and
// the GEMMs over it miss the TLB less (2-4% on the 1.3B's denoise). On the
// reference VM, whose balloon reports free huge-page blocks to its host, a
// cold huge page cost 9 µs per 4 KiB to touch and a cold 4 KiB page 11,
// but a 4 KiB page out of the free memory too fragmented for huge pages
// 1.3 (Device.SmallPagesFirst uses those first). It is on unless
// FERRY_HUGEPAGES=0; the kernel ignores the advice where THP is set to
// "never".
var HugePages = os.Getenv("FERRY_HUGEPAGES") != "0"

// mapAnon maps size bytes of private anonymous memory, outside the Go heap.
// Segments of a huge page or more start on a huge-page boundary (the
// mapping is made one huge page larger and trimmed) and are advised
// MADV_HUGEPAGE, so that every whole 2 MiB of them can be a huge page.
func mapAnon(size int64) ([]byte, error) {
	if !HugePages || size < hugePage {
		return mapPlain(size)
	}
	n := uintptr(size)
	raw, err := unix.MmapPtr(-1, 0, nil, n+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	base := uintptr(raw)
	start := (base + hugePage - 1) &^ (hugePage - 1)
	if head := start - base; head > 0 {
		_ = unix.MunmapPtr(raw, head)
	}
	if tail := base + n + hugePage - (start + n); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(raw, start-base+n), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(raw, start-base)), n)
	// Advice only: a kernel without THP says EINVAL and maps 4 KiB pages.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, nil
}

// mapSmall maps size bytes with 4 KiB pages (Device.SmallPagesFirst).
func mapSmall(size int64) ([]byte, error) { return mapPlain(size) }

// mapPlain maps size bytes with no alignment or advice.
func mapPlain(size int64) ([]byte, error) {
	raw, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return unsafe.Slice((*byte)(raw), size), nil
}

// unmap gives back a mapping made by mapAnon.
func unmap(b []byte) {
	if len(b) > 0 {
		_ = unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
	}
}
