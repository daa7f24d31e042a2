package train

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ferry/dataset"
)

// cacheSample is one sample of a hand-made cache.
type cacheSample struct {
	name    string
	latent  []int // [z, T, h, w]
	textLen int
}

// writeCache makes a latent cache of samples (values from their index)
// with text width textDim padded to maxSeq, as ferry cache would.
func writeCache(t *testing.T, dir string, zDim, textDim, maxSeq int, samples []cacheSample) *dataset.Cache {
	t.Helper()
	idx := &dataset.Index{Format: dataset.Format, Version: dataset.Version,
		Model: dataset.Model{Fingerprint: "test", ZDim: zDim, TextDim: textDim}, Settings: dataset.Settings{MaxSeqLen: maxSeq}}
	counts := map[string]int{}
	for i, s := range samples {
		frames := (s.latent[1]-1)*4 + 1
		bucket := dataset.BucketName(s.latent[3]*8, s.latent[2]*8, frames)
		if counts[bucket] == 0 {
			idx.Buckets = append(idx.Buckets, dataset.Bucket{Name: bucket, LatentShape: s.latent})
		}
		counts[bucket]++
		file := dataset.SampleFile(bucket, s.name)
		lat := make([]float32, numElems(s.latent))
		for j := range lat {
			lat[j] = float32(i*1000 + j)
		}
		text := make([]float32, s.textLen*textDim)
		for j := range text {
			text[j] = float32(-(i*1000 + j + 1))
		}
		if err := os.MkdirAll(filepath.Join(dir, bucket), 0o755); err != nil {
			t.Fatal(err)
		}
		meta := dataset.Meta{Name: s.name, Source: s.name + ".mp4", ModTime: time.Unix(0, 0), Frames: frames, Model: "test"}
		if err := dataset.WriteSample(filepath.Join(dir, filepath.FromSlash(file)), meta, lat, s.latent, text, []int{s.textLen, textDim}); err != nil {
			t.Fatal(err)
		}
		idx.Samples = append(idx.Samples, dataset.Entry{Name: s.name, Bucket: bucket, File: file, LatentShape: s.latent,
			TextLen: s.textLen, Frames: frames, Source: s.name + ".mp4"})
	}
	for i := range idx.Buckets {
		idx.Buckets[i].Samples = counts[idx.Buckets[i].Name]
	}
	if err := dataset.WriteIndex(dir, idx); err != nil {
		t.Fatal(err)
	}
	c, err := dataset.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCacheData: batches follow the cache's order for the seed, stack one
// bucket's samples, pad the text with zero rows, roll into the next epoch
// and come back the same after a Seek.
func TestCacheData(t *testing.T) {
	dir := t.TempDir()
	samples := []cacheSample{{"a", []int{4, 1, 2, 2}, 2}, {"b", []int{4, 2, 2, 2}, 3}, {"c", []int{4, 1, 2, 2}, 1}}
	c := writeCache(t, dir, 4, 3, 5, samples)
	d, err := NewCacheData(c, 7, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	order := c.Batches(7, 0, 2)
	if len(order) != 2 {
		t.Fatalf("epoch of %d batches, want 2 (a+c, b)", len(order))
	}
	var seen [][]float32
	for k, idx := range append(order, c.Batches(7, 1, 2)[0]) {
		pos := d.Position()
		if want := (Position{Epoch: k / 2, Index: k % 2}); pos != want {
			t.Fatalf("batch %d at %v, want %v", k, pos, want)
		}
		b, err := d.Next()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Check(); err != nil {
			t.Fatal(err)
		}
		if b.Samples() != len(idx) || !slices.Equal(b.ContextShape, []int{len(idx), 5, 3}) {
			t.Fatalf("batch %d: latents %v, context %v for samples %v", k, b.LatentShape, b.ContextShape, idx)
		}
		for j, i := range idx {
			s := samples[i]
			per := numElems(s.latent)
			if b.Latents[j*per] != float32(i*1000) || b.Latents[(j+1)*per-1] != float32(i*1000+per-1) {
				t.Errorf("batch %d sample %d: latents not those of %s", k, j, s.name)
			}
			text := b.Context[j*15 : (j+1)*15]
			for r := range 15 {
				want := float32(0)
				if r < s.textLen*3 {
					want = float32(-(i*1000 + r + 1))
				}
				if text[r] != want {
					t.Fatalf("batch %d sample %s text[%d] = %g, want %g", k, s.name, r, text[r], want)
				}
			}
		}
		seen = append(seen, b.Latents)
	}
	if err := d.Seek(Position{Epoch: 0, Index: 1}); err != nil {
		t.Fatal(err)
	}
	b, _ := d.Next()
	if !slices.Equal(b.Latents, seen[1]) {
		t.Error("Seek did not return to the same batch")
	}
	if err := d.Seek(Position{Epoch: 0, Index: 2}); err == nil {
		t.Error("Seek past the epoch's batches accepted")
	}
}
