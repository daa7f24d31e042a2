package dataset

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"ferry/checkpoint"
)

// Cache is an opened latent cache: its validated index. Samples are read
// one at a time by Load.
type Cache struct {
	dir string
	idx *Index
}

// SampleInfo describes one sample without reading it.
type SampleInfo struct {
	Name        string
	Bucket      string
	LatentShape []int // [z_dim, T, H/8, W/8]
	TextLen     int   // real tokens; the text tensor is [TextLen, text_dim]
}

// Sample is one sample's tensors.
type Sample struct {
	Name        string
	Latents     []float32
	LatentShape []int // [z_dim, T, H/8, W/8]
	Text        []float32
	TextShape   []int // [TextLen, text_dim]
}

// maxIndexBytes bounds index.json (about 300 bytes a sample).
const maxIndexBytes = 256 << 20

// Open reads and validates dir/index.json. A missing or corrupt index is
// an error naming the file.
func Open(dir string) (*Cache, error) {
	path := filepath.Join(dir, IndexName)
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open cache: %w (make one with ferry cache)", err)
	}
	if st.Size() > maxIndexBytes {
		return nil, fmt.Errorf("%s: %d bytes is too large for a cache index", path, st.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	idx, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Cache{dir: dir, idx: idx}, nil
}

// Dir is the cache folder.
func (c *Cache) Dir() string { return c.dir }

// Model is what the cache was encoded with.
func (c *Cache) Model() Model { return c.idx.Model }

// Settings are the encoding choices of the run that wrote the index.
func (c *Cache) Settings() Settings { return c.idx.Settings }

// Len is the number of samples.
func (c *Cache) Len() int { return len(c.idx.Samples) }

// Sample describes sample i (0 <= i < Len).
func (c *Cache) Sample(i int) SampleInfo {
	e := c.idx.Samples[i]
	return SampleInfo{Name: e.Name, Bucket: e.Bucket, LatentShape: slices.Clone(e.LatentShape), TextLen: e.TextLen}
}

// Buckets lists the buckets in index order.
func (c *Cache) Buckets() []Bucket {
	out := make([]Bucket, len(c.idx.Buckets))
	for i, b := range c.idx.Buckets {
		out[i] = Bucket{Name: b.Name, LatentShape: slices.Clone(b.LatentShape), Samples: b.Samples}
	}
	return out
}

// Batches is one epoch's batches of sample indices. Every batch holds
// samples of one bucket (one latent shape, so they stack); each bucket's
// samples are shuffled, cut into batches of batch (the last one shorter
// when the bucket does not divide), and the batches of all buckets
// shuffled together. The order depends only on (seed, epoch) and the
// index. batch < 1 counts as 1.
func (c *Cache) Batches(seed uint64, epoch, batch int) [][]int {
	batch = max(batch, 1)
	rng := rand.New(rand.NewPCG(seed, uint64(epoch)))
	var out [][]int
	for _, b := range c.idx.Buckets {
		var members []int
		for i, e := range c.idx.Samples {
			if e.Bucket == b.Name {
				members = append(members, i)
			}
		}
		rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		for len(members) > 0 {
			n := min(batch, len(members))
			out = append(out, members[:n:n])
			members = members[n:]
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Load reads sample i's tensors, checking the file against the index
// (name, shapes, dtypes); a mismatch or a corrupt file is an error naming
// the file.
func (c *Cache) Load(i int) (*Sample, error) {
	if i < 0 || i >= len(c.idx.Samples) {
		return nil, fmt.Errorf("sample %d of a cache of %d", i, len(c.idx.Samples))
	}
	e := c.idx.Samples[i]
	path := filepath.Join(c.dir, filepath.FromSlash(e.File))
	f, err := checkpoint.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cache sample %q: %w (run ferry cache again)", e.Name, err)
	}
	defer f.Close()
	h, err := header(f)
	if err != nil {
		return nil, fmt.Errorf("cache sample %q: %w (run ferry cache again)", e.Name, err)
	}
	textShape := []int{e.TextLen, c.idx.Model.TextDim}
	switch {
	case h.Meta.Name != e.Name:
		err = fmt.Errorf("holds sample %q", h.Meta.Name)
	case !slices.Equal(h.LatentShape, e.LatentShape):
		err = fmt.Errorf("latents are %v, the index says %v", h.LatentShape, e.LatentShape)
	case !slices.Equal(h.TextShape, textShape):
		err = fmt.Errorf("text is %v, the index says %v", h.TextShape, textShape)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w (run ferry cache again)", path, err)
	}
	s := &Sample{Name: e.Name, LatentShape: h.LatentShape, TextShape: h.TextShape}
	if s.Latents, err = readF32(f, LatentsTensor); err == nil {
		s.Text, err = readF32(f, TextTensor)
	}
	if err != nil {
		return nil, fmt.Errorf("cache sample %q: %w", e.Name, err)
	}
	return s, nil
}

func readF32(f *checkpoint.File, name string) ([]float32, error) {
	info, _ := f.Lookup(name)
	return f.ReadF32(info)
}
