package checkpoint

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/dtype"
)

// writeShards writes the tensors of randomTensors over two shards plus an
// index in dir, the way transformers names them, and returns the tensors.
func writeShards(t *testing.T, dir, base string) []RawTensor {
	t.Helper()
	all := randomTensors(11)
	shards := [][]RawTensor{all[:5], all[5:]}
	weightMap := map[string]string{}
	var total int64
	for i, part := range shards {
		name := filepath.Base(shardName(base, i+1, len(shards)))
		if err := WriteFile(filepath.Join(dir, name), part, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, r := range part {
			weightMap[r.Name] = name
			total += int64(len(r.Data))
		}
	}
	if err := WriteIndex(filepath.Join(dir, base+".safetensors.index.json"), weightMap, total); err != nil {
		t.Fatal(err)
	}
	return all
}

func shardName(base string, i, n int) string {
	return base + "-0000" + string(rune('0'+i)) + "-of-0000" + string(rune('0'+n)) + ".safetensors"
}

func TestShardedSet(t *testing.T) {
	dir := t.TempDir()
	want := writeShards(t, dir, "model")
	for _, open := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
		s, err := OpenSet(open)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Files()) != 2 {
			t.Errorf("%d files open, want 2", len(s.Files()))
		}
		names := s.Names()
		if !slices.IsSorted(names) || len(names) != len(want) {
			t.Errorf("Names() = %v", names)
		}
		var total int64
		for _, w := range want {
			info, ok := s.Lookup(w.Name)
			if !ok {
				t.Fatalf("%q missing", w.Name)
			}
			total += info.Size
			pread := make([]byte, info.Size)
			if err := s.ReadAt(info, pread); err != nil {
				t.Fatal(err)
			}
			mapped, err := s.Bytes(info)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pread, w.Data) || !bytes.Equal(mapped, w.Data) {
				t.Errorf("%q: bytes differ", w.Name)
			}
			if err := s.DropCache(info); err != nil {
				t.Errorf("DropCache(%q): %v", w.Name, err)
			}
		}
		if s.TotalBytes() != total {
			t.Errorf("TotalBytes = %d, want %d", s.TotalBytes(), total)
		}
		if got := s.IndexMetadata()["total_size"]; got != float64(total) {
			t.Errorf("index total_size = %v, want %d", got, total)
		}
		emb, _ := s.Lookup("t.I64")
		rows := make([]byte, 2*5*8)
		if err := s.ReadRows(emb, []int{2, 0}, rows); err != nil {
			t.Fatal(err)
		}
		src := want[slices.IndexFunc(want, func(r RawTensor) bool { return r.Name == "t.I64" })].Data
		if !bytes.Equal(rows[:40], src[80:120]) || !bytes.Equal(rows[40:], src[:40]) {
			t.Error("Set.ReadRows returned the wrong rows")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenSetFindsConventionalNames(t *testing.T) {
	one := []RawTensor{{Name: "w", DType: dtype.F32, Shape: []int{1}, Data: make([]byte, 4)}}
	for _, name := range []string{"model.safetensors", "diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors"} {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, name), one, nil); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSet(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := s.Lookup("w"); !ok || filepath.Base(s.Path()) != name {
			t.Errorf("%s: opened %s", name, s.Path())
		}
		s.Close()
	}
	dir := t.TempDir()
	writeShards(t, dir, "diffusion_pytorch_model")
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(s.Path()) != "diffusion_pytorch_model.safetensors.index.json" {
		t.Errorf("opened %s", s.Path())
	}
	s.Close()
}

func TestOpenSetErrors(t *testing.T) {
	one := func(name string) RawTensor {
		return RawTensor{Name: name, DType: dtype.F32, Shape: []int{1}, Data: make([]byte, 4)}
	}
	type setup func(t *testing.T, dir string) string // returns the path to open
	writeIdx := func(content string) setup {
		return func(t *testing.T, dir string) string {
			for _, n := range []string{"s1.safetensors", "s2.safetensors"} {
				if err := WriteFile(filepath.Join(dir, n), []RawTensor{one("in_" + n[:2])}, nil); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, "model.safetensors.index.json")
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	cases := []struct {
		name     string
		setup    setup
		want     string
		notExist bool
	}{
		{"missing shard", writeIdx(`{"weight_map":{"in_s1":"s1.safetensors","x":"s3.safetensors"}}`), "shard s3.safetensors is missing", true},
		{"tensor not in shard", writeIdx(`{"weight_map":{"in_s1":"s2.safetensors","in_s2":"s2.safetensors"}}`), "does not contain", false},
		{"not json", writeIdx(`weight_map`), "not valid JSON", false},
		{"no weight_map", writeIdx(`{"metadata":{}}`), "no weight_map", false},
		{"weight_map not object", writeIdx(`{"weight_map":[1]}`), "malformed index", false},
		{"shard not string", writeIdx(`{"weight_map":{"a":5}}`), "malformed index", false},
		{"shard null", writeIdx(`{"weight_map":{"a":null}}`), "null", false},
		{"shard escapes", writeIdx(`{"weight_map":{"a":"../s1.safetensors"}}`), "beside the index", false},
		{"duplicate name in index", writeIdx(`{"weight_map":{"in_s1":"s1.safetensors","in_s1":"s2.safetensors"}}`), "duplicate key", false},
		{"duplicate across shards", func(t *testing.T, dir string) string {
			if err := WriteFile(filepath.Join(dir, "s1.safetensors"), []RawTensor{one("same")}, nil); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(filepath.Join(dir, "s2.safetensors"), []RawTensor{one("other"), one("same")}, nil); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "model.safetensors.index.json")
			if err := WriteIndex(p, map[string]string{"same": "s1.safetensors", "other": "s2.safetensors"}, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}, "in both", false},
		{"bad shard", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "s1.safetensors"), []byte("garbage!garbage!"), 0o644)
			p := filepath.Join(dir, "model.safetensors.index.json")
			if err := WriteIndex(p, map[string]string{"a": "s1.safetensors"}, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}, "s1.safetensors", false},
		{"empty folder", func(t *testing.T, dir string) string { return dir }, "no weights", true},
		{"not a zip", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), []byte("x"), 0o644)
			return dir
		}, "pytorch_model.bin: not a PyTorch zip checkpoint", false},
		{"ambiguous singles", func(t *testing.T, dir string) string {
			for _, n := range []string{"a.safetensors", "b.safetensors"} {
				if err := WriteFile(filepath.Join(dir, n), []RawTensor{one(n)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}, "no *.safetensors.index.json", false},
		{"missing path", func(t *testing.T, dir string) string { return filepath.Join(dir, "nope.safetensors") }, "nope.safetensors", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := c.setup(t, dir)
			s, err := OpenSet(path)
			if err == nil {
				s.Close()
				t.Fatal("OpenSet succeeded")
			}
			if s != nil {
				t.Error("OpenSet returned a Set with its error")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, path) {
				t.Errorf("error %q does not name %s and %q", msg, path, c.want)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != c.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, c.notExist)
			}
		})
	}
}

// TestConcurrentReads reads, maps and drops from several goroutines at
// once, as the executor's copy worker and the compute thread do; run it
// with -race.
func TestConcurrentReads(t *testing.T) {
	dir := t.TempDir()
	want := writeShards(t, dir, "model")
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for _, w := range want {
				info, _ := s.Lookup(w.Name)
				buf := make([]byte, info.Size)
				if err := s.ReadAt(info, buf); err != nil {
					errs <- err
					return
				}
				m, err := s.Bytes(info)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, w.Data) || !bytes.Equal(m, w.Data) {
					errs <- errors.New(w.Name + ": bytes differ")
					return
				}
				if g%2 == 0 {
					if err := s.DropCache(info); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
