//go:build linux

package checkpoint

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"ferry/dtype"
)

var sink byte

// mappingRSS reads the resident kilobytes of the mapping starting at addr
// from /proc/self/smaps.
func mappingRSS(t *testing.T, addr uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := fmt.Sprintf("%x-", addr)
	sc := bufio.NewScanner(f)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			found = true
			continue
		}
		if found && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("mapping at %x not in /proc/self/smaps", addr)
	return 0
}

// cachedPages counts the pages of a file mapping that are in the page cache.
func cachedPages(t *testing.T, m []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestDropCacheLowersRSS touches a mapped tensor, drops it, and checks in
// /proc/self/smaps that its pages left this process, and with mincore that
// DropAll evicted the file from the page cache.
func TestDropCacheLowersRSS(t *testing.T) {
	const n = 4 << 20 // bytes per tensor
	path := filepath.Join(t.TempDir(), "big.safetensors")
	tensors := []RawTensor{
		{Name: "a", DType: dtype.F32, Shape: []int{n / 4}, Data: make([]byte, n)},
		{Name: "b", DType: dtype.F32, Shape: []int{n / 4}, Data: make([]byte, n)},
	}
	if err := WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ := f.Lookup("a")
	b, _ := f.Lookup("b")
	var sum byte
	for _, info := range []TensorInfo{a, b} {
		v, err := f.Bytes(info)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(v); i += 4096 {
			sum += v[i]
		}
	}
	sink = sum // keep the loads
	addr := uintptr(unsafe.Pointer(&f.mapped[0]))
	before := mappingRSS(t, addr)
	if before < 2*n/1024*9/10 {
		t.Fatalf("RSS of the mapping %d KiB after touching it all; want about %d", before, 2*n/1024)
	}
	if cached, want := cachedPages(t, f.mapped), 2*n/os.Getpagesize(); cached < want {
		t.Fatalf("%d pages in the page cache after touching %d", cached, want)
	}
	if err := f.DropCache(a); err != nil {
		t.Fatal(err)
	}
	after := mappingRSS(t, addr)
	// All of a's pages leave. Some of b's may go too: the kernel maps file
	// pages in large folios (2 MiB PMDs here) and unmaps a whole one when
	// asked for part of it. They fault back in on access.
	if after > before-n/1024+8 {
		t.Errorf("RSS %d KiB -> %d KiB after dropping %d KiB", before, after, n/1024)
	}
	if err := f.DropAll(); err != nil {
		t.Fatal(err)
	}
	if all := mappingRSS(t, addr); all > 8 {
		t.Errorf("RSS %d KiB after DropAll, want ~0", all)
	}
	// fadvise evicted the (clean, synced) pages from the page cache too;
	// mincore on a file mapping reports page-cache residency.
	if cached := cachedPages(t, f.mapped); cached > 2 {
		t.Errorf("%d pages still in the page cache after DropAll", cached)
	}
	// Dropped pages come back on access with the same bytes.
	v, _ := f.Bytes(a)
	if v[0] != 0 || v[len(v)-1] != 0 {
		t.Error("bytes changed after DropCache")
	}
}

// TestPageCached checks the page cache probe against reads and drops: all
// of a file just read is cached, and after a drop most of it is not.
func TestPageCached(t *testing.T) {
	const n = 1 << 20
	s, path := readSynced(t, n)
	cached, total, err := s.PageCached()
	if err != nil {
		t.Fatal(err)
	}
	if cached != total || total <= n {
		t.Fatalf("after reading everything: %d of %d bytes cached, want all", cached, total)
	}
	if onTmpfs(path) {
		t.Log("tmpfs keeps its pages: the drop half of the test does not apply")
		return
	}
	if err := s.DropAll(); err != nil {
		t.Fatal(err)
	}
	if cached, _, err = s.PageCached(); err != nil {
		t.Fatal(err)
	}
	if cached > total/2 {
		t.Fatalf("after dropping: %d of %d bytes still cached", cached, total)
	}
}

// TestProbeUncached reads only chunks outside the page cache, at most the
// limit: a fully cached file probes as nothing. Where the file system
// allows O_DIRECT the probe bypasses the page cache and leaves the chunks
// uncached (a second probe finds them again); elsewhere it reads through
// the page cache and leaves them cached.
func TestProbeUncached(t *testing.T) {
	const n = 4 * ProbeChunk
	s, path := readSynced(t, n)
	if p, err := s.ProbeUncached(n); err != nil || p.Bytes != 0 {
		t.Fatalf("probe of a cached file: %+v, %v; want nothing read", p, err)
	}
	if onTmpfs(path) {
		t.Log("tmpfs keeps its pages: the uncached half of the test does not apply")
		return
	}
	if err := s.DropAll(); err != nil {
		t.Fatal(err)
	}
	before, _, _ := s.PageCached()
	if before > ProbeChunk {
		t.Fatalf("%d bytes still cached after dropping", before)
	}
	p, err := s.ProbeUncached(2 * ProbeChunk)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bytes != 2*ProbeChunk || p.Seconds <= 0 || p.GBps() <= 0 {
		t.Fatalf("probe with a limit of 2 chunks: %+v (%.2f GB/s)", p, p.GBps())
	}
	after, _, _ := s.PageCached()
	rest, err := s.ProbeUncached(n)
	if err != nil {
		t.Fatal(err)
	}
	if p.Direct {
		if after > before {
			t.Errorf("a direct probe left %d more bytes cached", after-before)
		}
		if rest.Bytes < p.Bytes || !rest.Direct {
			t.Errorf("second probe read %+v after a direct one read %d bytes: the chunks should still be uncached", rest, p.Bytes)
		}
		return
	}
	t.Log("this file system refuses O_DIRECT: the probe read through the page cache")
	if after < before+p.Bytes {
		t.Errorf("cached %d bytes before the probe and %d after reading %d", before, after, p.Bytes)
	}
	if rest.Bytes+p.Bytes > n {
		t.Errorf("second probe read %d bytes after %d of a %d-byte tensor: it read cached chunks", rest.Bytes, p.Bytes, n)
	}
}

// A direct probe and a buffered one sum to a buffered one.
func TestProbeAdd(t *testing.T) {
	d, b := Probe{Bytes: 8, Seconds: 1, Direct: true}, Probe{Bytes: 8, Seconds: 1}
	for _, c := range []struct {
		a, b   Probe
		direct bool
	}{{d, d, true}, {d, b, false}, {b, d, false}, {Probe{}, d, true}, {b, Probe{}, false}} {
		if got := c.a.Add(c.b); got.Direct != c.direct || got.Bytes != c.a.Bytes+c.b.Bytes {
			t.Errorf("%+v + %+v = %+v, want direct %v", c.a, c.b, got, c.direct)
		}
	}
}

// readSynced writes a checkpoint of one n-byte tensor, syncs it (dirty
// pages cannot be dropped), opens it and reads the tensor, so that all of
// it is in the page cache. The set closes with the test.
func readSynced(t *testing.T, n int) (*Set, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := WriteFile(path, []RawTensor{{Name: "a", DType: dtype.F32, Shape: []int{n / 4}, Data: make([]byte, n)}}, nil); err != nil {
		t.Fatal(err)
	}
	if w, err := os.OpenFile(path, os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	} else if err := w.Sync(); err != nil {
		t.Fatal(err)
	} else {
		w.Close()
	}
	s, err := OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a, _ := s.Lookup("a")
	if err := s.ReadAt(a, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// onTmpfs says path is on tmpfs, which keeps its pages through a drop.
func onTmpfs(path string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(path, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
}
