package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// torchExpected is testdata/torchzip/expected.json, written by make.py
// beside the checkpoints: per file, its tensors (dtype, shape, values) or
// the words its refusal must contain.
type torchExpected struct {
	Error   string                        `json:"error"`
	Tensors map[string][3]json.RawMessage `json:"tensors"`
}

func readTorchExpected(t *testing.T) map[string]torchExpected {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "torchzip", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp map[string]torchExpected
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestTorchZipReadsStateDicts opens the checkpoints make.py wrote as
// torch.save writes them and reads every tensor, by pread and by mmap,
// with the dtype, shape and values it was saved with; nothing else is
// listed (not _metadata, not the epoch beside a nested state dict).
func TestTorchZipReadsStateDicts(t *testing.T) {
	for file, exp := range readTorchExpected(t) {
		if exp.Error != "" {
			continue
		}
		t.Run(file, func(t *testing.T) {
			f, err := Open(filepath.Join("testdata", "torchzip", file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var names []string
			for _, info := range f.Tensors() {
				names = append(names, info.Name)
			}
			want := slices.Sorted(func(yield func(string) bool) {
				for k := range exp.Tensors {
					if !yield(k) {
						return
					}
				}
			})
			if slices.Sort(names); !slices.Equal(names, want) {
				t.Fatalf("tensors %v, want %v", names, want)
			}
			for name, e := range exp.Tensors {
				var dt string
				var shape []int
				var vals []float64
				if json.Unmarshal(e[0], &dt) != nil || json.Unmarshal(e[1], &shape) != nil || json.Unmarshal(e[2], &vals) != nil {
					t.Fatalf("%s: bad expected entry", name)
				}
				info, _ := f.Lookup(name)
				if info.DType.String() != dt || !slices.Equal(info.Shape, shape) {
					t.Errorf("%s: %s %v, want %s %v", name, info.DType, info.Shape, dt, shape)
					continue
				}
				buf := make([]byte, info.Size)
				if err := f.ReadAt(info, buf); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				mapped, err := f.Bytes(info)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(buf, mapped) {
					t.Errorf("%s: pread and mmap differ", name)
				}
				got, err := f.ReadF32(info)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !slices.EqualFunc(got, vals, func(a float32, b float64) bool { return float64(a) == b || math.Abs(float64(a)-b) < 1e-7*math.Abs(b) }) {
					t.Errorf("%s: values %v, want %v", name, got, vals)
				}
			}
		})
	}
}

// TestTorchZipRefusals: what ferry cannot read in place is refused in one
// line naming the file and the fault.
func TestTorchZipRefusals(t *testing.T) {
	for file, exp := range readTorchExpected(t) {
		if exp.Error == "" {
			continue
		}
		_, err := Open(filepath.Join("testdata", "torchzip", file))
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), exp.Error) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %v, want one line naming the file and %q", file, err, exp.Error)
		}
	}
	legacy := filepath.Join(t.TempDir(), "old.pth")
	if err := os.WriteFile(legacy, append(slices.Clone(legacyMagic), make([]byte, 60)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(legacy); err == nil || !strings.Contains(err.Error(), "before PyTorch 1.6") {
		t.Errorf("legacy format: %v", err)
	}
}

// TestOpenSetFindsTorchWeights: a component folder with a PyTorch
// checkpoint and no safetensors opens it; two of other names are
// ambiguous.
func TestOpenSetFindsTorchWeights(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "torchzip", "state_dict.pth"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "diffusion_pytorch_model.bin"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup("proj.weight"); !ok || s.Len() != 11 {
		t.Errorf("set of %d tensors, want the checkpoint's 11", s.Len())
	}
	s.Close()
	two := t.TempDir()
	for _, n := range []string{"a.pth", "b.pth"} {
		if err := os.WriteFile(filepath.Join(two, n), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenSet(two); err == nil || !strings.Contains(err.Error(), "a.pth, b.pth") {
		t.Errorf("two PyTorch checkpoints: %v", err)
	}
}

// FuzzTorchZip feeds arbitrary pickles to the reader inside a well-formed
// archive: never a panic, refusals are *FormatErrors, and every tensor it
// accepts lies inside the file.
func FuzzTorchZip(f *testing.F) {
	for _, name := range []string{"state_dict.pth", "nested.ckpt", "strided.pth", "list.pth"} {
		z, err := zip.OpenReader(filepath.Join("testdata", "torchzip", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range z.File {
			if strings.HasSuffix(e.Name, "data.pkl") {
				b, err := readEntry(e, maxPickleSize)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(b)
			}
		}
		z.Close()
	}
	f.Fuzz(func(t *testing.T, pkl []byte) {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		for _, e := range []struct {
			name string
			data []byte
		}{{"archive/data.pkl", pkl}, {"archive/data/0", make([]byte, 64)}, {"archive/data/1", make([]byte, 16)}} {
			fw, err := w.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
			if err != nil {
				t.Fatal(err)
			}
			fw.Write(e.data)
		}
		w.Close()
		data := buf.Bytes()
		h, err := parseTorchZip("fuzz.pth", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal is not a one-line FormatError: %v", err)
			}
			return
		}
		for _, info := range h.tensors {
			if info.Offset < 0 || info.Size < 0 || info.Offset+info.Size > int64(len(data)) || info.Elements()*int64(info.DType.Size()) != info.Size {
				t.Fatalf("tensor %q: offset %d size %d in a %d-byte file", info.Name, info.Offset, info.Size, len(data))
			}
		}
	})
}
