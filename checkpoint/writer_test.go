package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/dtype"
)

// allDTypes is every dtype a checkpoint may hold.
var allDTypes = []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.F8E4M3, dtype.F8E5M2, dtype.I64, dtype.I32, dtype.Bool, dtype.F64}

// randomTensors makes one tensor per dtype plus a scalar and an empty one,
// filled with random bytes.
func randomTensors(seed uint64) []RawTensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []RawTensor
	for i, d := range allDTypes {
		shape := []int{3 + i, 5}
		data := make([]byte, shape[0]*shape[1]*d.Size())
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		out = append(out, RawTensor{Name: "t." + d.String(), DType: d, Shape: shape, Data: data})
	}
	out = append(out,
		RawTensor{Name: "scalar", DType: dtype.F32, Shape: nil, Data: []byte{0, 0, 0x80, 0x3f}},
		RawTensor{Name: "empty", DType: dtype.BF16, Shape: []int{0, 7}, Data: nil},
		RawTensor{Name: "odd \"name\" é", DType: dtype.Bool, Shape: []int{3}, Data: []byte{1, 0, 1}},
	)
	return out
}

func TestWriteReadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	want := randomTensors(7)
	md := map[string]string{"format": "pt", "note": "ünïcode"}
	if err := WriteFile(path, want, md); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkConsistent(t, f)
	if got := f.Metadata(); len(got) != 2 || got["format"] != "pt" || got["note"] != md["note"] {
		t.Errorf("metadata = %v, want %v", got, md)
	}
	got := f.Tensors()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	// The writer lays tensors out in the order given, so file order matches.
	for i, w := range want {
		if got[i].Name != w.Name || got[i].DType != w.DType || !slices.Equal(got[i].Shape, w.Shape) {
			t.Errorf("tensor %d = %s %v %v, want %s %v %v", i, got[i].Name, got[i].DType, got[i].Shape, w.Name, w.DType, w.Shape)
		}
		pread := make([]byte, got[i].Size)
		if err := f.ReadAt(got[i], pread); err != nil {
			t.Fatal(err)
		}
		mapped, err := f.Bytes(got[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pread, w.Data) || !bytes.Equal(mapped, w.Data) {
			t.Errorf("tensor %q: pread %x, mmap %x, want %x", w.Name, head(pread), head(mapped), head(w.Data))
		}
	}
	// The data section starts 8-aligned, as the writer pads the header.
	if off := got[0].Offset; off%8 != 0 {
		t.Errorf("data starts at %d, not a multiple of 8", off)
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// TestWriterMatchesSpecLayout decodes the written header by hand, without
// the package's parser, to check the on-disk format itself.
func TestWriterMatchesSpecLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spec.safetensors")
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	err := WriteFile(path, []RawTensor{
		{Name: "b", DType: dtype.F32, Shape: []int{2}, Data: data[:8]},
		{Name: "a", DType: dtype.BF16, Shape: []int{2}, Data: data[8:]},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	hdr := raw[8 : 8+n]
	if trimmed := bytes.TrimRight(hdr, " "); bytes.ContainsAny(hdr[len(trimmed):], "\x00\t\n") {
		t.Errorf("header padding is not spaces: %q", hdr)
	}
	var doc map[string]struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(hdr, &doc); err != nil {
		t.Fatalf("header %q: %v", hdr, err)
	}
	if e := doc["b"]; e.DType != "F32" || !slices.Equal(e.Offsets, []int64{0, 8}) {
		t.Errorf("b = %+v, want F32 at [0, 8]", e)
	}
	if e := doc["a"]; e.DType != "BF16" || !slices.Equal(e.Offsets, []int64{8, 12}) {
		t.Errorf("a = %+v, want BF16 at [8, 12]", e)
	}
	if !bytes.Equal(raw[8+n:], data) {
		t.Errorf("data section %v, want %v", raw[8+n:], data)
	}
}

func TestReadRows(t *testing.T) {
	const rows, width = 50, 6
	table := make([]byte, rows*width*2)
	for i := range table {
		table[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "emb.safetensors")
	if err := WriteFile(path, []RawTensor{{Name: "emb", DType: dtype.BF16, Shape: []int{rows, width}, Data: table}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Lookup("emb")
	rowBytes := width * 2
	for _, ids := range [][]int{{0}, {49}, {3, 4, 5, 6}, {7, 2, 2, 49, 0, 1}, {}} {
		dst := make([]byte, len(ids)*rowBytes)
		if err := f.ReadRows(info, ids, dst); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if !bytes.Equal(dst[i*rowBytes:(i+1)*rowBytes], table[id*rowBytes:(id+1)*rowBytes]) {
				t.Errorf("rows %v: row %d (id %d) wrong", ids, i, id)
			}
		}
	}
	bad := []struct {
		ids  []int
		dst  int
		want string
	}{
		{[]int{50}, rowBytes, "outside"},
		{[]int{-1}, rowBytes, "outside"},
		{[]int{48, 49, 50}, 3 * rowBytes, "outside"},
		{[]int{1}, rowBytes + 1, "buffer"},
	}
	for _, b := range bad {
		err := f.ReadRows(info, b.ids, make([]byte, b.dst))
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), "emb") {
			t.Errorf("ReadRows(%v) = %v, want an error mentioning %q and the tensor", b.ids, err, b.want)
		}
	}
}

func TestReadRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.safetensors")
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	if err := WriteFile(path, []RawTensor{{Name: "x", DType: dtype.F32, Shape: []int{250}, Data: data}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Lookup("x")
	// Stream through a 64-byte staging buffer, as the executor does.
	var got []byte
	buf := make([]byte, 64)
	for off := int64(0); off < info.Size; off += int64(len(buf)) {
		n := min(int64(len(buf)), info.Size-off)
		if err := f.ReadRange(info, off, buf[:n]); err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("streamed bytes differ")
	}
	if err := f.ReadRange(info, 990, make([]byte, 11)); err == nil {
		t.Error("ReadRange past the tensor's end succeeded")
	}
	if err := f.ReadAt(info, make([]byte, 999)); err == nil {
		t.Error("ReadAt with a short buffer succeeded")
	}
	other := info
	other.File = "elsewhere.safetensors"
	if err := f.ReadAt(other, make([]byte, 1000)); err == nil {
		t.Error("ReadAt of another file's tensor succeeded")
	}
	vals, err := f.ReadF32(info)
	if err != nil || len(vals) != 250 || math.Float32bits(vals[1]) != binary.LittleEndian.Uint32(data[4:]) {
		t.Errorf("ReadF32 = %v..., %v", vals[:2], err)
	}
}

func TestWriterStreaming(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.safetensors")
	infos := []TensorInfo{
		{Name: "a", DType: dtype.F32, Shape: []int{4, 4}},
		{Name: "z", DType: dtype.F16, Shape: []int{0}},
		{Name: "b", DType: dtype.I32, Shape: []int{3}},
	}
	w, err := NewWriter(path, infos, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	layout := w.Tensors()
	if layout[1].Offset != layout[0].Offset+64 || layout[2].Offset != layout[1].Offset {
		t.Errorf("layout not back to back in the given order: %+v", layout)
	}
	a, err := w.Next("a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // four writes of 16 bytes
		if _, err := a.Write(bytes.Repeat([]byte{byte(i)}, 16)); err != nil {
			t.Fatal(err)
		}
	}
	// The zero-size "z" may be skipped.
	b, err := w.Next("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(b, bytes.NewReader(make([]byte, 12))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file visible at its path before Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, want := range layout {
		got, ok := f.Lookup(want.Name)
		if !ok || got.Offset != want.Offset || got.Size != want.Size {
			t.Errorf("%s: read %+v, writer planned %+v", want.Name, got, want)
		}
	}
	assertOnlyFiles(t, dir, "s.safetensors")
}

// assertOnlyFiles checks that dir holds exactly the named files: no
// temporary file left behind.
func assertOnlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

func TestWriterLeavesNothingOnFailure(t *testing.T) {
	infos := []TensorInfo{
		{Name: "a", DType: dtype.F32, Shape: []int{2}},
		{Name: "b", DType: dtype.F32, Shape: []int{2}},
	}
	cases := []struct {
		name string
		run  func(w *Writer) error // returns the error Close or the misuse gave
		want string
	}{
		{"abort", func(w *Writer) error {
			w.Write("a", make([]byte, 8))
			w.Abort()
			return w.Close()
		}, "aborted"},
		{"missing tensor", func(w *Writer) error {
			w.Write("a", make([]byte, 8))
			return w.Close()
		}, "never written"},
		{"incomplete tensor", func(w *Writer) error {
			tw, _ := w.Next("a")
			tw.Write(make([]byte, 4))
			return w.Close()
		}, "incomplete"},
		{"wrong order", func(w *Writer) error {
			if err := w.Write("b", make([]byte, 8)); err == nil {
				return nil
			}
			return w.Close()
		}, "order"},
		{"too many bytes", func(w *Writer) error {
			tw, _ := w.Next("a")
			if _, err := tw.Write(make([]byte, 9)); err == nil {
				return nil
			}
			w.Write("b", make([]byte, 8)) // sticky: the first fault wins
			return w.Close()
		}, "past"},
		{"stale tensor writer", func(w *Writer) error {
			a, _ := w.Next("a")
			a.Write(make([]byte, 8))
			w.Next("b")
			_, err := a.Write(make([]byte, 1))
			return err
		}, "moved on"},
		{"wrong length", func(w *Writer) error {
			return w.Write("a", make([]byte, 7))
		}, "want 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.safetensors")
			w, err := NewWriter(path, infos, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = c.run(w)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, c.want)
			}
			w.Close() // a failed writer must clean up on Close too
			assertOnlyFiles(t, dir)
		})
	}
}

func TestNewWriterRejectsBadLayouts(t *testing.T) {
	cases := []struct {
		name    string
		tensors []TensorInfo
		want    string
	}{
		{"duplicate", []TensorInfo{{Name: "a", DType: dtype.F32}, {Name: "a", DType: dtype.F32}}, "duplicate"},
		{"invalid dtype", []TensorInfo{{Name: "a"}}, "invalid dtype"},
		{"negative dim", []TensorInfo{{Name: "a", DType: dtype.F32, Shape: []int{-2}}}, "negative"},
		{"huge", []TensorInfo{{Name: "a", DType: dtype.F32, Shape: []int{math.MaxInt, math.MaxInt, 4}}}, "too large"},
		{"reserved name", []TensorInfo{{Name: "__metadata__", DType: dtype.F32}}, "reserved"},
		{"size mismatch", []TensorInfo{{Name: "a", DType: dtype.F32, Shape: []int{2}, Size: 4}}, "does not match"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.safetensors")
			w, err := NewWriter(path, c.tensors, nil)
			if err == nil {
				w.Abort()
				t.Fatal("NewWriter accepted the layout")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file and %q", err, c.want)
			}
			assertOnlyFiles(t, dir)
		})
	}
}

func TestWriteIndexRejectsEscapingShards(t *testing.T) {
	dir := t.TempDir()
	for _, shard := range []string{"../x.safetensors", "/abs/x.safetensors", "x.bin"} {
		if err := WriteIndex(filepath.Join(dir, "m.safetensors.index.json"), map[string]string{"a": shard}, 0); err == nil {
			t.Errorf("WriteIndex accepted shard %q", shard)
		}
	}
	assertOnlyFiles(t, dir)
}

// TestFallbackAndClose checks the read-into-memory stand-in for mmap used
// on platforms without it, and that a closed File refuses reads.
func TestFallbackAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := WriteFile(path, randomTensors(3), nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := readWhole(f.f, f.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range f.Tensors() {
		m, err := f.Bytes(info)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m, whole[info.Offset:info.Offset+info.Size]) {
			t.Errorf("%s: fallback bytes differ from the mapping", info.Name)
		}
	}
	info := f.Tensors()[0]
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Bytes(info); err == nil {
		t.Error("Bytes after Close succeeded")
	}
	if err := f.ReadAt(info, make([]byte, info.Size)); err == nil {
		t.Error("ReadAt after Close succeeded")
	}
	if err := f.DropCache(info); err == nil {
		t.Error("DropCache after Close succeeded")
	}
}
