package checkpoint

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"ferry/dtype"
)

// File is one open weights file: safetensors, or a PyTorch zip checkpoint
// (torch.save's format, read in place the same way). Its methods are safe for concurrent
// use, except Close, which must come after every other call has returned.
type File struct {
	path string
	f    *os.File
	size int64
	hdr  *header

	mu     sync.Mutex
	mapped []byte // whole-file read-only mapping, made by the first Bytes
	closed bool
}

// Open opens the weights file at path (safetensors or a PyTorch zip
// checkpoint) and validates its tensor table completely; on any fault it
// returns a nil *File and an error naming path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, formatErr(path, "is a directory, not a safetensors file (use OpenSet for a component folder)")
	}
	var hdr *header
	switch torchZip, legacy := fileKind(f); {
	case torchZip:
		hdr, err = parseTorchZip(path, f, st.Size())
	case legacy:
		err = formatErr(path, "a PyTorch checkpoint in the format before PyTorch 1.6, which ferry does not read: re-save it with a recent torch.save or convert it to safetensors")
	case isTorchName(path):
		err = formatErr(path, "not a PyTorch zip checkpoint (torch.save's format since PyTorch 1.6): re-save it with torch.save or convert it to safetensors")
	default:
		hdr, err = parseHeader(path, f, st.Size())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{path: path, f: f, size: st.Size(), hdr: hdr}, nil
}

// Path is the path the file was opened with; TensorInfo.File holds the same.
func (f *File) Path() string { return f.path }

// Size is the file's length in bytes.
func (f *File) Size() int64 { return f.size }

// Tensors lists the tensors in file order: by ascending data offset, which
// is the order a sequential read visits them.
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.hdr.tensors))
	for i, t := range f.hdr.tensors {
		out[i] = t.clone()
	}
	return out
}

// Lookup describes the tensor called name.
func (f *File) Lookup(name string) (TensorInfo, bool) {
	i, ok := f.hdr.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.hdr.tensors[i].clone(), true
}

// Metadata is the header's __metadata__ map (nil when absent). It is shared:
// do not modify it.
func (f *File) Metadata() map[string]string { return f.hdr.metadata }

// TotalBytes is the sum of the tensors' data sizes.
func (f *File) TotalBytes() int64 {
	var n int64
	for _, t := range f.hdr.tensors {
		n += t.Size
	}
	return n
}

// check verifies that [off, off+n) lies inside tensor info of this file.
func (f *File) check(info TensorInfo, off, n int64) error {
	if info.File != f.path {
		return fmt.Errorf("tensor %q belongs to %q, not %s", info.Name, info.File, f.path)
	}
	if info.Offset < 8 || info.Size < 0 || info.Offset > f.size-info.Size {
		return fmt.Errorf("%s: tensor %q: range [%d, +%d) outside the file (%d bytes)", f.path, info.Name, info.Offset, info.Size, f.size)
	}
	if off < 0 || n < 0 || off > info.Size-n {
		return fmt.Errorf("%s: tensor %q: bytes [%d, %d) outside its %d bytes", f.path, info.Name, off, off+n, info.Size)
	}
	return nil
}

// ReadAt fills dst, whose length must be info.Size, with the tensor's bytes,
// read through the OS (pread).
func (f *File) ReadAt(info TensorInfo, dst []byte) error {
	if int64(len(dst)) != info.Size {
		return fmt.Errorf("read %s from %s: buffer holds %d bytes, tensor has %d", info.Name, f.path, len(dst), info.Size)
	}
	return f.ReadRange(info, 0, dst)
}

// ReadRange fills dst with bytes [off, off+len(dst)) of the tensor's data,
// so that a large tensor can be streamed through a small staging buffer.
func (f *File) ReadRange(info TensorInfo, off int64, dst []byte) error {
	if err := f.check(info, off, int64(len(dst))); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if len(dst) == 0 {
		return nil
	}
	if _, err := f.f.ReadAt(dst, info.Offset+off); err != nil {
		return fmt.Errorf("read %s from %s: %w", info.Name, f.path, err)
	}
	return nil
}

// ReadRows gathers rows of a tensor of rank >= 1 (rows of the first
// dimension, a row being everything after it) into dst, in the order given,
// without reading the rest: dst holds len(rows) rows back to back. Runs of
// consecutive rows are read with one pread each.
func (f *File) ReadRows(info TensorInfo, rows []int, dst []byte) error {
	rowBytes, err := rowSize(info)
	if err != nil {
		return fmt.Errorf("read rows of %s from %s: %w", info.Name, f.path, err)
	}
	if int64(len(dst)) != int64(len(rows))*rowBytes {
		return fmt.Errorf("read rows of %s from %s: buffer holds %d bytes, %d rows need %d",
			info.Name, f.path, len(dst), len(rows), int64(len(rows))*rowBytes)
	}
	for i := 0; i < len(rows); {
		r := rows[i]
		if r < 0 || r >= info.Shape[0] {
			return fmt.Errorf("read rows of %s from %s: row %d outside [0, %d)", info.Name, f.path, r, info.Shape[0])
		}
		run := 1
		for i+run < len(rows) && rows[i+run] == r+run && r+run < info.Shape[0] {
			run++
		}
		chunk := dst[int64(i)*rowBytes : int64(i+run)*rowBytes]
		if err := f.ReadRange(info, int64(r)*rowBytes, chunk); err != nil {
			return err
		}
		i += run
	}
	return nil
}

// rowSize is the byte length of one row of the first dimension.
func rowSize(info TensorInfo) (int64, error) {
	if len(info.Shape) == 0 {
		return 0, errors.New("a scalar has no rows")
	}
	if info.Shape[0] == 0 {
		return 0, nil
	}
	return info.Size / int64(info.Shape[0]), nil
}

// Bytes returns the tensor's data as a view of a read-only mapping of the
// whole file, mapped on the first call. The view is valid until Close;
// writing to it faults. Where mmap is unavailable the file is read into
// memory once instead.
func (f *File) Bytes(info TensorInfo) ([]byte, error) {
	if err := f.check(info, 0, info.Size); err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	m, err := f.mapping()
	if err != nil {
		return nil, err
	}
	end := info.Offset + info.Size
	return m[info.Offset:end:end], nil
}

func (f *File) mapping() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("map %s: %w", f.path, os.ErrClosed)
	}
	if f.mapped == nil {
		m, err := mapFile(f.f, f.size)
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", f.path, err)
		}
		f.mapped = m
	}
	return f.mapped, nil
}

// DropCache tells the kernel the tensor's pages are no longer needed: they
// leave this process's mapping (RSS) and, when nothing else maps them, the
// page cache. Pages are dropped whole, so a page shared with a neighbouring
// tensor goes too (and the kernel may unmap the whole 2 MiB folio around a
// boundary); that only costs a re-read, never wrong data, if the neighbour
// is used again. Where the OS has no such advice, DropCache does nothing.
func (f *File) DropCache(info TensorInfo) error {
	if err := f.check(info, 0, info.Size); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	return f.dropRange(info.Offset, info.Size)
}

// DropAll drops the whole file's pages, as DropCache does for one tensor.
func (f *File) DropAll() error { return f.dropRange(0, f.size) }

func (f *File) dropRange(off, n int64) error {
	if n == 0 {
		return nil
	}
	page := int64(os.Getpagesize())
	start := off / page * page
	end := min((off+n+page-1)/page*page, f.size)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("drop %s: %w", f.path, os.ErrClosed)
	}
	if f.mapped != nil {
		if err := adviseDontNeed(f.mapped[start:end]); err != nil {
			return fmt.Errorf("drop %s mapping: %w", f.path, err)
		}
	}
	if err := fadviseDontNeed(f.f, start, end-start); err != nil {
		return fmt.Errorf("drop %s page cache: %w", f.path, err)
	}
	return nil
}

// ReadF32 reads the tensor and converts it to float32, for small tensors
// and tests; the executor converts on its copy worker instead.
func (f *File) ReadF32(info TensorInfo) ([]float32, error) {
	raw := make([]byte, info.Size)
	if err := f.ReadAt(info, raw); err != nil {
		return nil, err
	}
	out := make([]float32, info.Elements())
	if err := dtype.ToF32(out, raw, info.DType); err != nil {
		return nil, fmt.Errorf("read %s from %s: %w", info.Name, f.path, err)
	}
	return out, nil
}

// Close unmaps the file and closes it. Views from Bytes become invalid.
// Closing twice is a no-op.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var errs []error
	if f.mapped != nil {
		errs = append(errs, unmapFile(f.mapped))
		f.mapped = nil
	}
	errs = append(errs, f.f.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s: %w", f.path, err)
	}
	return nil
}

// readWhole reads the file into memory: the stand-in for a mapping where
// there is no mmap.
func readWhole(f *os.File, size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, fmt.Errorf("file of %d bytes is too large to read on this platform", size)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n < len(b) {
		return nil, err
	}
	return b, nil
}
