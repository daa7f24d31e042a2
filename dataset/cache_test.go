package dataset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// spec is a sample to write: its name, latent frames and text length.
type spec struct {
	name        string
	frames, len int
}

const (
	testZ    = 4
	testText = 3
)

// values makes n distinct values from a seed (what a sample holds).
func values(seed, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(seed*1000+i) / 7
	}
	return v
}

// writeCache writes samples of 16×16 pixels (latents [4, T, 2, 2]) with
// the given frame counts and an index, and returns the index.
func writeCache(t testing.TB, dir string, specs []spec) *Index {
	t.Helper()
	idx := &Index{Format: Format, Version: Version, Model: Model{Fingerprint: "sha256:test", ZDim: testZ, TextDim: testText},
		Settings: Settings{Width: 16, Height: 16, Frames: 9, MaxSeqLen: 16, DType: "fp32"}}
	counts := map[string]int{}
	shapes := map[string][]int{}
	for i, s := range specs {
		b := BucketName(16, 16, s.frames)
		shape := []int{testZ, (s.frames-1)/4 + 1, 2, 2}
		if err := os.MkdirAll(filepath.Join(dir, b), 0o755); err != nil {
			t.Fatal(err)
		}
		m := Meta{Name: s.name, Source: s.name + ".gif", ModTime: time.Unix(1700000000, 5), Bytes: 10, Caption: "c " + s.name,
			SourceWidth: 20, SourceHeight: 16, Frames: s.frames, Settings: idx.Settings.String(), Model: idx.Model.Fingerprint}
		err := WriteSample(filepath.Join(dir, SampleFile(b, s.name)), m, values(i, product(shape)), shape, values(-i, s.len*testText), []int{s.len, testText})
		if err != nil {
			t.Fatal(err)
		}
		if counts[b] == 0 {
			shapes[b] = shape
		}
		counts[b]++
		idx.Samples = append(idx.Samples, Entry{Name: s.name, Bucket: b, File: SampleFile(b, s.name), LatentShape: shape,
			TextLen: s.len, Frames: s.frames, Source: m.Source, Caption: m.Caption})
	}
	for _, b := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		idx.Buckets = append(idx.Buckets, Bucket{Name: b, LatentShape: shapes[b], Samples: counts[b]})
	}
	if err := WriteIndex(dir, idx); err != nil {
		t.Fatal(err)
	}
	return idx
}

var mixed = []spec{{"a", 5, 2}, {"b", 1, 3}, {"c", 5, 1}, {"d", 5, 4}, {"e", 1, 2}, {"f", 5, 2}, {"g", 5, 5}}

// TestOpenLoad: what was written comes back, shapes and values.
func TestOpenLoad(t *testing.T) {
	dir := t.TempDir()
	writeCache(t, dir, mixed)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != len(mixed) || len(c.Buckets()) != 2 || c.Model().TextDim != testText {
		t.Fatalf("len %d, buckets %v, model %+v", c.Len(), c.Buckets(), c.Model())
	}
	for i, s := range mixed {
		info := c.Sample(i)
		wantShape := []int{testZ, (s.frames-1)/4 + 1, 2, 2}
		if info.Name != s.name || info.TextLen != s.len || !slices.Equal(info.LatentShape, wantShape) || info.Bucket != BucketName(16, 16, s.frames) {
			t.Errorf("sample %d: %+v", i, info)
		}
		got, err := c.Load(i)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Latents, values(i, product(wantShape))) || !slices.Equal(got.Text, values(-i, s.len*testText)) ||
			!slices.Equal(got.TextShape, []int{s.len, testText}) || !slices.Equal(got.LatentShape, wantShape) || got.Name != s.name {
			t.Errorf("sample %d loaded wrong: %+v", i, got.TextShape)
		}
	}
	if _, err := c.Load(len(mixed)); err == nil {
		t.Error("Load past the end accepted")
	}
}

// TestReadHeader: the metadata round-trips, and UpToDate sees each change.
func TestReadHeader(t *testing.T) {
	dir := t.TempDir()
	writeCache(t, dir, mixed[:1])
	h, err := ReadHeader(filepath.Join(dir, SampleFile(BucketName(16, 16, 5), "a")))
	if err != nil {
		t.Fatal(err)
	}
	m := h.Meta
	if m.Name != "a" || m.Frames != 5 || m.SourceWidth != 20 || !m.ModTime.Equal(time.Unix(1700000000, 5)) || !slices.Equal(h.TextShape, []int{2, testText}) {
		t.Fatalf("header %+v", h)
	}
	if !m.UpToDate(m) {
		t.Error("a sample is not up to date with itself")
	}
	for name, change := range map[string]func(*Meta){
		"mtime":    func(m *Meta) { m.ModTime = m.ModTime.Add(time.Nanosecond) },
		"size":     func(m *Meta) { m.Bytes++ },
		"caption":  func(m *Meta) { m.Caption += "!" },
		"settings": func(m *Meta) { m.Settings = "width=32" },
		"model":    func(m *Meta) { m.Model = "sha256:other" },
		"source":   func(m *Meta) { m.Source = "a.png" },
	} {
		other := m
		change(&other)
		if m.UpToDate(other) {
			t.Errorf("a changed %s counts as up to date", name)
		}
	}
}

// TestBatches: one bucket per batch, every sample once, the last partial
// batch kept, the same order for the same (seed, epoch) only.
func TestBatches(t *testing.T) {
	dir := t.TempDir()
	writeCache(t, dir, mixed)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ batch, batches int }{{2, 4}, {3, 3}, {1, 7}, {0, 7}, {10, 2}} {
		got := c.Batches(1, 0, tc.batch)
		if len(got) != tc.batches {
			t.Errorf("batch %d: %d batches %v, want %d", tc.batch, len(got), got, tc.batches)
		}
		seen := map[int]int{}
		for _, b := range got {
			if len(b) == 0 || len(b) > max(tc.batch, 1) {
				t.Errorf("batch %d: a batch of %d", tc.batch, len(b))
			}
			for _, i := range b {
				seen[i]++
				if c.Sample(i).Bucket != c.Sample(b[0]).Bucket {
					t.Errorf("batch %v mixes buckets", b)
				}
			}
		}
		for i := range c.Len() {
			if seen[i] != 1 {
				t.Errorf("batch %d: sample %d appears %d times", tc.batch, i, seen[i])
			}
		}
	}
	a, b := c.Batches(7, 3, 2), c.Batches(7, 3, 2)
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Error("the same seed and epoch gave two orders")
	}
	differs := false
	for epoch := range 5 {
		if !slices.EqualFunc(a, c.Batches(7, 4+epoch, 2), slices.Equal) {
			differs = true
		}
	}
	if !differs {
		t.Error("five other epochs all gave epoch 3's order")
	}
}

// TestIndexExample: the documented example in testdata validates.
func TestIndexExample(t *testing.T) {
	data, err := os.ReadFile("testdata/index.json")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := parseIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Samples) != 3 || idx.Samples[1].TextLen != 3 || idx.Model.TextDim != 64 {
		t.Errorf("index %+v", idx)
	}
}

// TestOpenErrors: every corrupt index is one error naming index.json.
func TestOpenErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/index.json")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	sample := func(m map[string]any, i int) map[string]any { return m["samples"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name, data, want string
	}{
		{"garbage", "not json", "not a cache index"},
		{"empty", "", "not a cache index"},
		{"trailing data", string(good) + "{}", "data after"},
		{"unknown field", edit(func(m map[string]any) { m["extra"] = 1 }), "unknown field"},
		{"other format", edit(func(m map[string]any) { m["format"] = "x" }), "not a ferry latent cache"},
		{"other version", edit(func(m map[string]any) { m["version"] = 2 }), "run ferry cache again"},
		{"no text dim", edit(func(m map[string]any) { m["model"].(map[string]any)["text_dim"] = 0 }), "must be positive"},
		{"no text length", edit(func(m map[string]any) { m["settings"].(map[string]any)["max_sequence_length"] = 0 }), "must be positive"},
		{"text too long", edit(func(m map[string]any) { sample(m, 0)["text_len"] = 513 }), "not in 1..512"},
		{"unknown bucket", edit(func(m map[string]any) { sample(m, 0)["bucket"] = "nope" }), "not listed"},
		{"escaping file", edit(func(m map[string]any) { sample(m, 0)["file"] = "../../etc/passwd" }), "want \"32x32_9f/cat.safetensors\""},
		{"escaping name", edit(func(m map[string]any) { sample(m, 0)["name"] = "../x" }), "not a plain file name"},
		{"shape off bucket", edit(func(m map[string]any) { sample(m, 0)["latent_shape"] = []int{16, 2, 4, 4} }), "its bucket's"},
		{"no text", edit(func(m map[string]any) { sample(m, 0)["text_len"] = 0 }), "text length 0"},
		{"frames off", edit(func(m map[string]any) { sample(m, 0)["frames"] = 5 }), "latent frames"},
		{"duplicate", edit(func(m map[string]any) {
			sample(m, 2)["name"] = "cat"
			sample(m, 2)["file"] = "32x32_9f/cat.safetensors"
		}), "listed twice"},
		{"count off", edit(func(m map[string]any) { m["buckets"].([]any)[0].(map[string]any)["samples"] = 2 }), "counts 2"},
		{"huge shape", edit(func(m map[string]any) {
			m["buckets"].([]any)[0].(map[string]any)["latent_shape"] = []int{16, 1 << 20, 1 << 20, 4}
		}), "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, IndexName), []byte(tc.data), 0o644)
			_, err := Open(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Join(dir, IndexName)) {
				t.Errorf("err %v; want one naming index.json and saying %q", err, tc.want)
			}
		})
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "ferry cache") {
		t.Errorf("no index: %v", err)
	}
}

// TestLoadErrors: a sample file that is missing, corrupt or not the one
// the index describes is an error naming it.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(dir string, idx *Index)
		want  string
	}{
		{"missing", func(dir string, idx *Index) { os.Remove(filepath.Join(dir, idx.Samples[0].File)) }, "no such file"},
		{"truncated", func(dir string, idx *Index) {
			p := filepath.Join(dir, idx.Samples[0].File)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-3], 0o644)
		}, "run ferry cache again"},
		{"garbage", func(dir string, idx *Index) {
			os.WriteFile(filepath.Join(dir, idx.Samples[0].File), []byte("garbage!"), 0o644)
		}, "run ferry cache again"},
		{"another sample", func(dir string, idx *Index) {
			other := filepath.Join(dir, idx.Samples[2].File) // same bucket and shape, another name
			data, _ := os.ReadFile(other)
			os.WriteFile(filepath.Join(dir, idx.Samples[0].File), data, 0o644)
		}, "holds sample \"c\""},
		{"other shape", func(dir string, idx *Index) {
			h, _ := ReadHeader(filepath.Join(dir, idx.Samples[0].File))
			shape := []int{testZ, 1, 2, 2} // 1 latent frame, not 2
			WriteSample(filepath.Join(dir, idx.Samples[0].File), h.Meta, values(0, product(shape)), shape, values(0, 2*testText), []int{2, testText})
		}, "latents are [4 1 2 2]"},
		{"other text", func(dir string, idx *Index) {
			idx.Samples[0].TextLen = 3
			WriteIndex(dir, idx)
		}, "text is [2 3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			idx := writeCache(t, dir, mixed)
			tc.spoil(dir, idx)
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Load(0)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "a.safetensors") {
				t.Errorf("err %v; want one naming a.safetensors and saying %q", err, tc.want)
			}
			if _, err := c.Load(1); err != nil {
				t.Errorf("an intact sample: %v", err)
			}
		})
	}
}

// FuzzOpen: no index.json makes Open panic or accept something
// inconsistent; what it accepts, Batches covers exactly once.
func FuzzOpen(f *testing.F) {
	good, err := os.ReadFile("testdata/index.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":"ferry-latent-cache","version":1,"model":{"z_dim":1,"text_dim":1},"settings":{"max_sequence_length":1},"buckets":[],"samples":[]}`))
	f.Add([]byte(`{"samples":[{}]}`))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, IndexName)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Open(dir)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			return
		}
		if err := c.idx.Validate(); err != nil {
			t.Fatalf("opened an index that does not validate: %v", err)
		}
		seen := make([]int, c.Len())
		for _, b := range c.Batches(1, 2, 3) {
			for _, i := range b {
				seen[i]++
				if c.Sample(i).Bucket != c.Sample(b[0]).Bucket {
					t.Fatal("a batch mixes buckets")
				}
			}
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("sample %d in %d batches", i, n)
			}
		}
	})
}
