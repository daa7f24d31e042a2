package checkpoint

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile builds a safetensors file from a header string and dataLen zero
// bytes of data, with a correct length prefix.
func rawFile(header string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

// writeTemp writes content to a fresh file in t's temp dir.
func writeTemp(t *testing.T, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenRejectsBadFiles(t *testing.T) {
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<40)
	pastEnd := make([]byte, 16)
	binary.LittleEndian.PutUint64(pastEnd, 100)

	cases := []struct {
		name    string
		content []byte
		want    string // distinctive word of the reason
	}{
		{"empty", nil, "truncated"},
		{"seven bytes", []byte{1, 2, 3, 4, 5, 6, 7}, "truncated"},
		{"header length absurd", hugeLen, "limit"},
		{"header length past end", pastEnd, "past the end of the file"},
		{"not json", rawFile("hello world", 0), "not a JSON object"},
		{"json array", rawFile(`[1,2]`, 0), "not a JSON object"},
		{"json string", rawFile(`"x"`, 0), "not a JSON object"},
		{"broken json", rawFile(`{"a":`, 0), "not valid JSON"},
		{"trailing garbage", rawFile(`{} x`, 0), "after top-level value"},
		{"second object", rawFile(`{}{}`, 0), "not valid JSON"},
		{"nul padding", rawFile("{}\x00\x00", 0), "not valid JSON"},
		{"invalid utf8", rawFile("{\"\xff\":1}", 0), "UTF-8"},
		{"entry not object", rawFile(`{"a":5}`, 0), "not an object"},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), "missing dtype"},
		{"null dtype", rawFile(`{"a":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, 4), "missing dtype"},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), "missing shape"},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "missing data_offsets"},
		{"dtype not string", rawFile(`{"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}}`, 4), "dtype is not a string"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}}`, 4), "unsupported dtype"},
		{"unsupported I8", rawFile(`{"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}}`, 4), "unsupported dtype"},
		{"unsupported U8", rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 4), "unsupported dtype"},
		{"lower-case dtype", rawFile(`{"a":{"dtype":"bfloat16","shape":[2],"data_offsets":[0,4]}}`, 4), "unsupported dtype"},
		{"shape not list", rawFile(`{"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}}`, 4), "shape is not"},
		{"shape float", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "shape is not"},
		{"shape string", rawFile(`{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4), "shape is not"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "negative dimension"},
		{"overflowing dims", rawFile(`{"a":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,4]}}`, 4), "overflow"},
		{"dim past int64", rawFile(`{"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}}`, 4), "shape is not"},
		{"dims overflow bytes", rawFile(`{"a":{"dtype":"F64","shape":[1073741824,1073741824,2],"data_offsets":[0,8]}}`, 8), "size mismatch"},
		{"offsets not pair", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4), "not a pair"},
		{"offsets negative", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 4), "negative"},
		{"begin after end", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}}`, 8), "begin 8 > end 4"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), "size mismatch"},
		{"past data end", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), "past the end of the data section"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), "overlaps"},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "duplicate key \"a\""},
		{"duplicate field", rawFile(`{"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}`, 4), "duplicate key \"dtype\""},
		{"duplicate escaped", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "duplicate key"},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, 0), "not a string"},
		{"metadata not object", rawFile(`{"__metadata__":[1]}`, 0), "not an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, "bad.safetensors", c.content)
			f, err := Open(path)
			if err == nil {
				f.Close()
				t.Fatalf("Open accepted the file")
			}
			if f != nil {
				t.Errorf("Open returned a non-nil File with error %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error %q does not name the file", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not mention %q", msg, c.want)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line", msg)
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != path {
				t.Errorf("error %v is not a *FormatError for %s", err, path)
			}
		})
	}
}

func TestOpenMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.safetensors")
	f, err := Open(path)
	if f != nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open(missing) = %v, %v; want fs.ErrNotExist naming the path", f, err)
	}
}

func TestOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if f != nil || err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("Open(dir) = %v, %v; want a directory error", f, err)
	}
}

// TestOpenAccepts covers headers the spec allows that a strict parser
// might refuse by mistake.
func TestOpenAccepts(t *testing.T) {
	cases := []struct {
		name    string
		content []byte
		tensors int
	}{
		{"empty object", rawFile(`{}`, 0), 0},
		{"space padding", rawFile(`{}      `, 0), 0},
		{"null metadata", rawFile(`{"__metadata__":null}`, 0), 0},
		{"scalar", rawFile(`{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4), 1},
		{"empty tensors share offsets", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"c":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]}}`, 4), 3},
		{"huge dim times zero", rawFile(`{"z":{"dtype":"F32","shape":[2147483647,2147483647,2147483647,0],"data_offsets":[0,0]}}`, 0), 1},
		{"unknown entry field", rawFile(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8],"extra":true}}`, 8), 1},
		{"trailing bytes after data", rawFile(`{"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}`, 10), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Open(writeTemp(t, "ok.safetensors", c.content))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := len(f.Tensors()); got != c.tensors {
				t.Fatalf("%d tensors, want %d", got, c.tensors)
			}
			checkConsistent(t, f)
		})
	}
}

// checkConsistent asserts the invariants every opened File must keep:
// tensors in offset order, inside the data section, not overlapping, sized
// by dtype and shape, and found by Lookup.
func checkConsistent(t testing.TB, f *File) {
	t.Helper()
	var end int64
	dataStart := int64(8 + binary.LittleEndian.Uint64(headerPrefix(t, f)))
	for i, ti := range f.Tensors() {
		if ti.Offset < dataStart || ti.Size < 0 || ti.Offset+ti.Size > f.Size() {
			t.Fatalf("tensor %q [%d,+%d) outside data [%d,%d)", ti.Name, ti.Offset, ti.Size, dataStart, f.Size())
		}
		if ti.Elements()*int64(ti.DType.Size()) != ti.Size {
			t.Fatalf("tensor %q: %d elements of %s in %d bytes", ti.Name, ti.Elements(), ti.DType, ti.Size)
		}
		if ti.Size > 0 {
			if ti.Offset < end {
				t.Fatalf("tensor %d %q starts at %d before the previous end %d", i, ti.Name, ti.Offset, end)
			}
			end = ti.Offset + ti.Size
		}
		if got, ok := f.Lookup(ti.Name); !ok || got.Offset != ti.Offset || got.Size != ti.Size {
			t.Fatalf("Lookup(%q) = %+v, %v; want %+v", ti.Name, got, ok, ti)
		}
	}
}

func headerPrefix(t testing.TB, f *File) []byte {
	b := make([]byte, 8)
	if _, err := f.f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}
