package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"ferry/dtype"
)

// writeBuffer batches small writes; large ones go straight to the file.
const writeBuffer = 4 << 20

// Writer streams a safetensors file to disk. The data section holds the
// tensors in the order given to NewWriter, back to back with no padding (the
// reference implementation refuses holes); data must arrive in that order.
// The file is written under a temporary name in the same folder and appears
// at its path only when Close succeeds.
type Writer struct {
	path    string
	tmp     *os.File
	buf     *bufio.Writer
	tensors []TensorInfo
	total   int64 // expected file size

	cur     int   // index of the tensor being written, -1 before the first
	written int64 // bytes of tensors[cur] written so far
	err     error // first failure; every later call returns it
	done    bool
}

// NewWriter plans the file: it checks the tensors (unique names, known
// dtypes, non-negative shapes), lays their data out in the order given, and
// writes the header, padded with spaces to a multiple of 8 bytes so that the
// data section starts aligned. Size, File and Offset of the given infos are
// ignored, except that a non-zero Size must match dtype and shape.
func NewWriter(path string, tensors []TensorInfo, metadata map[string]string) (*Writer, error) {
	layout, hdr, err := planLayout(path, tensors, metadata)
	if err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write checkpoint: %w", err)
	}
	w := &Writer{path: path, tmp: tmp, buf: bufio.NewWriterSize(tmp, writeBuffer), tensors: layout, cur: -1}
	w.total = int64(len(hdr))
	if len(layout) > 0 {
		last := layout[len(layout)-1]
		w.total = last.Offset + last.Size
	}
	if _, err := w.buf.Write(hdr); err != nil {
		w.Abort()
		return nil, fmt.Errorf("write %s header: %w", path, err)
	}
	return w, nil
}

// planLayout computes each tensor's absolute offset and the header bytes
// (length prefix included).
func planLayout(path string, tensors []TensorInfo, metadata map[string]string) ([]TensorInfo, []byte, error) {
	layout := make([]TensorInfo, len(tensors))
	seen := map[string]bool{}
	var off int64
	for i, t := range tensors {
		size, err := plannedSize(t)
		if err != nil {
			return nil, nil, fmt.Errorf("write %s: tensor %q: %w", path, t.Name, err)
		}
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("write %s: duplicate tensor name %q", path, t.Name)
		}
		seen[t.Name] = true
		if off > math.MaxInt64-size {
			return nil, nil, fmt.Errorf("write %s: data exceeds 2^63 bytes", path)
		}
		layout[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), File: path, Offset: off, Size: size}
		off += size
	}
	hdr := encodeHeader(layout, metadata)
	for i := range layout {
		layout[i].Offset += int64(len(hdr))
	}
	return layout, hdr, nil
}

// plannedSize checks a tensor description and returns its byte size.
func plannedSize(t TensorInfo) (int64, error) {
	if t.Name == metadataKey {
		return 0, fmt.Errorf("name %q is reserved for metadata", metadataKey)
	}
	if !utf8.ValidString(t.Name) {
		return 0, errors.New("name is not valid UTF-8")
	}
	if t.DType.Size() == 0 {
		return 0, fmt.Errorf("invalid dtype %v", t.DType)
	}
	n := uint64(t.DType.Size())
	overflow := false
	for _, d := range t.Shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", t.Shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		overflow = overflow || hi != 0 || lo > math.MaxInt64
		n = lo
	}
	if slices.Contains(t.Shape, 0) {
		n, overflow = 0, false
	}
	if overflow {
		return 0, fmt.Errorf("shape %v is too large", t.Shape)
	}
	if t.Size != 0 && t.Size != int64(n) {
		return 0, fmt.Errorf("size %d does not match shape %v of %s (%d bytes)", t.Size, t.Shape, t.DType, n)
	}
	return int64(n), nil
}

// encodeHeader writes the length prefix and the JSON header: __metadata__
// first, then the tensors in layout order, padded with spaces to 8 bytes.
func encodeHeader(layout []TensorInfo, metadata map[string]string) []byte {
	var b bytes.Buffer
	b.Write(make([]byte, 8)) // length, filled in below
	b.WriteByte('{')
	sep := ""
	if len(metadata) > 0 {
		b.WriteString(`"` + metadataKey + `":{`)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
		sep = ","
	}
	for _, t := range layout {
		b.WriteString(sep)
		sep = ","
		writeJSONString(&b, t.Name)
		fmt.Fprintf(&b, `:{"dtype":"%s","shape":[`, t.DType)
		for i, d := range t.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, t.Offset, t.Offset+t.Size)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	out := b.Bytes()
	binary.LittleEndian.PutUint64(out, uint64(len(out)-8))
	return out
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always marshals
	b.Write(enc)
}

// Tensors is the planned layout: every tensor with its absolute Offset and
// Size in the file being written.
func (w *Writer) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(w.tensors))
	for i, t := range w.tensors {
		out[i] = t.clone()
	}
	return out
}

// Next starts tensor name and returns a writer that accepts exactly its
// Size bytes, in as many calls as suits the caller. The previous tensor must
// be complete. Zero-size tensors may be skipped without a call.
func (w *Writer) Next(name string) (io.Writer, error) {
	if err := w.usable(); err != nil {
		return nil, err
	}
	if err := w.finishCurrent(); err != nil {
		return nil, w.fail(err)
	}
	i := w.cur + 1
	for i < len(w.tensors) && w.tensors[i].Name != name && w.tensors[i].Size == 0 {
		i++
	}
	if i == len(w.tensors) || w.tensors[i].Name != name {
		return nil, w.fail(fmt.Errorf("write %s: got tensor %q, want %q (tensors must arrive in the order given to NewWriter)", w.path, name, w.expected()))
	}
	w.cur, w.written = i, 0
	return tensorWriter{w, i}, nil
}

// Write writes tensor name whole: len(data) must be its Size.
func (w *Writer) Write(name string, data []byte) error {
	tw, err := w.Next(name)
	if err != nil {
		return err
	}
	if int64(len(data)) != w.tensors[w.cur].Size {
		return w.fail(fmt.Errorf("write %s: tensor %q: got %d bytes, want %d", w.path, name, len(data), w.tensors[w.cur].Size))
	}
	_, err = tw.Write(data)
	return err
}

// tensorWriter appends to tensor i, refusing bytes past its end, and
// refusing any once the Writer has moved on to a later tensor.
type tensorWriter struct {
	w *Writer
	i int
}

func (tw tensorWriter) Write(p []byte) (int, error) {
	w := tw.w
	if err := w.usable(); err != nil {
		return 0, err
	}
	t := w.tensors[tw.i]
	if tw.i != w.cur {
		return 0, w.fail(fmt.Errorf("write %s: tensor %q written after the writer moved on to %q", w.path, t.Name, w.tensors[w.cur].Name))
	}
	if int64(len(p)) > t.Size-w.written {
		return 0, w.fail(fmt.Errorf("write %s: tensor %q: %d bytes past its %d", w.path, t.Name, w.written+int64(len(p))-t.Size, t.Size))
	}
	n, err := w.buf.Write(p)
	w.written += int64(n)
	if err != nil {
		return n, w.fail(fmt.Errorf("write %s: %w", w.path, err))
	}
	return n, nil
}

// expected names the next tensor the writer wants, for error messages.
func (w *Writer) expected() string {
	if w.cur >= 0 && w.written < w.tensors[w.cur].Size {
		return w.tensors[w.cur].Name
	}
	if w.cur+1 < len(w.tensors) {
		return w.tensors[w.cur+1].Name
	}
	return "(none: all tensors written)"
}

func (w *Writer) finishCurrent() error {
	if w.cur < 0 {
		return nil
	}
	if t := w.tensors[w.cur]; w.written != t.Size {
		return fmt.Errorf("write %s: tensor %q incomplete: %d of %d bytes", w.path, t.Name, w.written, t.Size)
	}
	return nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("write %s: %w", w.path, os.ErrClosed)
	}
	return nil
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// Close checks that every tensor was written in full, flushes and syncs
// the file, and renames it to its path. On any failure, including an
// earlier one, the temporary file is removed and nothing appears at path.
func (w *Writer) Close() error {
	if w.done {
		return w.err
	}
	if err := w.complete(); err != nil {
		w.fail(err)
		w.Abort()
		return err
	}
	w.done = true
	if err := os.Rename(w.tmp.Name(), w.path); err != nil {
		os.Remove(w.tmp.Name())
		return w.fail(fmt.Errorf("write %s: %w", w.path, err))
	}
	syncDir(filepath.Dir(w.path))
	return nil
}

// complete verifies the data and makes the temporary file durable.
func (w *Writer) complete() error {
	if w.err != nil {
		return w.err
	}
	if err := w.finishCurrent(); err != nil {
		return err
	}
	var missing []string
	for _, t := range w.tensors[w.cur+1:] {
		if t.Size > 0 {
			missing = append(missing, t.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("write %s: %d tensors never written, first %q", w.path, len(missing), missing[0])
	}
	if err := w.buf.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	if st, err := w.tmp.Stat(); err != nil || st.Size() != w.total {
		return fmt.Errorf("write %s: temporary file is not %d bytes (%v)", w.path, w.total, err)
	}
	if err := w.tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	if err := w.tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	if err := w.tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	return nil
}

// Abort discards the file being written. It is safe after Close (a no-op
// then) and safe to call twice.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.err == nil {
		w.err = fmt.Errorf("write %s: aborted", w.path)
	}
	w.tmp.Close()
	os.Remove(w.tmp.Name())
}

// syncDir makes a rename durable where the OS allows syncing a directory;
// elsewhere it does nothing.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

// RawTensor is a tensor with its bytes in memory, for WriteFile.
type RawTensor struct {
	Name  string
	DType dtype.DType
	Shape []int
	Data  []byte
}

// F32Tensor is float32 values to write as a tensor: v viewed as its
// little-endian bytes (the byte order of every machine ferry runs on),
// not copied, so v must not change until the tensor is written.
func F32Tensor(name string, shape []int, v []float32) RawTensor {
	var data []byte
	if len(v) > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	}
	return RawTensor{Name: name, DType: dtype.F32, Shape: shape, Data: data}
}

// WriteFile writes a small safetensors file atomically, tensors in the
// order given.
func WriteFile(path string, tensors []RawTensor, metadata map[string]string) error {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	w, err := NewWriter(path, infos, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := w.Write(t.Name, t.Data); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}

// WriteIndex writes a *.safetensors.index.json mapping each tensor name to
// its shard file (a name relative to the index's folder), atomically.
func WriteIndex(path string, weightMap map[string]string, totalSize int64) error {
	if !strings.HasSuffix(path, ".index.json") {
		return fmt.Errorf("write index %s: name must end in .index.json", path)
	}
	for name, shard := range weightMap {
		if !filepath.IsLocal(shard) || !strings.HasSuffix(shard, ".safetensors") {
			return fmt.Errorf("write index %s: tensor %q maps to %q, not a .safetensors file beside the index", path, name, shard)
		}
	}
	doc := map[string]any{
		"metadata":   map[string]any{"total_size": totalSize},
		"weight_map": weightMap,
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("write index %s: %w", path, err)
	}
	return writeAtomic(path, append(data, '\n'))
}

// writeAtomic writes data to a temporary file beside path and renames it.
func writeAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}
