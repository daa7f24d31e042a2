package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// IndexName is the index file in a cache folder.
const IndexName = "index.json"

// Format and Version identify the cache layout in index.json and in every
// sample file's metadata; a reader refuses other versions.
const (
	Format  = "ferry-latent-cache"
	Version = 1
)

// Index is index.json.
type Index struct {
	Format   string   `json:"format"`
	Version  int      `json:"version"`
	Model    Model    `json:"model"`
	Settings Settings `json:"settings"`
	Buckets  []Bucket `json:"buckets"`
	Samples  []Entry  `json:"samples"`
}

// Model is what the cache was encoded with; a trainer checks it against
// the pipeline it trains.
type Model struct {
	// Fingerprint identifies tokenizer, text encoder and VAE
	// (wan.Pipeline.EncoderFingerprint).
	Fingerprint string `json:"fingerprint"`
	Dir         string `json:"dir,omitempty"`
	ZDim        int    `json:"z_dim"`
	TextDim     int    `json:"text_dim"`
}

// Settings are a run's encoding choices. Two runs with equal settings and
// model encode a sample identically.
type Settings struct {
	Width  int `json:"width"`
	Height int `json:"height"`
	// Frames is the most frames a clip contributes (the flag); a sample has
	// the largest 4k+1 not above it and its clip's length.
	Frames int `json:"frames"`
	// MaxSeqLen is the most tokens of a caption the text encoder reads;
	// the trainer pads the text to the pipeline's length (WanPipeline: 512).
	MaxSeqLen int    `json:"max_sequence_length"`
	DType     string `json:"dtype"`
	// VAETile is the VAE's spatial tile in pixels (0: untiled).
	VAETile   int `json:"vae_tile,omitempty"`
	VAEStride int `json:"vae_stride,omitempty"`
}

// String is the settings as sample metadata records them.
func (s Settings) String() string {
	return fmt.Sprintf("width=%d height=%d frames=%d max_sequence_length=%d dtype=%s vae_tile=%d vae_stride=%d",
		s.Width, s.Height, s.Frames, s.MaxSeqLen, s.DType, s.VAETile, s.VAEStride)
}

// Bucket is the samples of one latent shape.
type Bucket struct {
	Name        string `json:"name"`
	LatentShape []int  `json:"latent_shape"`
	Samples     int    `json:"samples"`
}

// Entry is one sample in the index.
type Entry struct {
	Name        string `json:"name"`
	Bucket      string `json:"bucket"`
	File        string `json:"file"` // relative to the cache folder
	LatentShape []int  `json:"latent_shape"`
	TextLen     int    `json:"text_len"`
	Frames      int    `json:"frames"`
	Source      string `json:"source"`
	Caption     string `json:"caption"`
}

// BucketName names the bucket of samples width×height pixels, frames long.
func BucketName(width, height, frames int) string {
	return fmt.Sprintf("%dx%d_%df", width, height, frames)
}

// SampleFile is a sample's path in the cache folder, relative.
func SampleFile(bucket, name string) string {
	return bucket + "/" + name + ".safetensors"
}

// parseIndex decodes and validates index.json's bytes.
func parseIndex(data []byte) (*Index, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var idx Index
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("not a cache index: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a cache index: data after the JSON object")
	}
	if err := idx.Validate(); err != nil {
		return nil, err
	}
	return &idx, nil
}

// Validate checks the index's own consistency: format and version, model
// sizes, every bucket's shape and count, every sample's bucket, file and
// sizes.
func (idx *Index) Validate() error {
	if idx.Format != Format {
		return fmt.Errorf("format %q, want %q (not a ferry latent cache)", idx.Format, Format)
	}
	if idx.Version != Version {
		return fmt.Errorf("cache version %d, this ferry reads version %d (run ferry cache again)", idx.Version, Version)
	}
	m := idx.Model
	if m.ZDim <= 0 || m.TextDim <= 0 || idx.Settings.MaxSeqLen <= 0 {
		return fmt.Errorf("model z_dim %d, text_dim %d, max_sequence_length %d: all must be positive", m.ZDim, m.TextDim, idx.Settings.MaxSeqLen)
	}
	buckets := map[string]Bucket{}
	for _, b := range idx.Buckets {
		if err := checkName("bucket", b.Name); err != nil {
			return err
		}
		if _, dup := buckets[b.Name]; dup {
			return fmt.Errorf("bucket %q is listed twice", b.Name)
		}
		if err := checkLatentShape(b.LatentShape, m.ZDim); err != nil {
			return fmt.Errorf("bucket %q: %w", b.Name, err)
		}
		buckets[b.Name] = b
	}
	counts := map[string]int{}
	names := map[string]bool{}
	for i, e := range idx.Samples {
		if err := e.validate(buckets, idx.Settings.MaxSeqLen); err != nil {
			return fmt.Errorf("sample %d (%q): %w", i, e.Name, err)
		}
		if names[e.Name] {
			return fmt.Errorf("sample %q is listed twice", e.Name)
		}
		names[e.Name] = true
		counts[e.Bucket]++
	}
	for _, b := range idx.Buckets {
		if counts[b.Name] != b.Samples {
			return fmt.Errorf("bucket %q counts %d samples, the index lists %d", b.Name, b.Samples, counts[b.Name])
		}
	}
	return nil
}

func (e Entry) validate(buckets map[string]Bucket, maxSeqLen int) error {
	if err := checkName("sample", e.Name); err != nil {
		return err
	}
	b, ok := buckets[e.Bucket]
	if !ok {
		return fmt.Errorf("bucket %q is not listed", e.Bucket)
	}
	if !slices.Equal(e.LatentShape, b.LatentShape) {
		return fmt.Errorf("latent shape %v, its bucket's is %v", e.LatentShape, b.LatentShape)
	}
	if e.File != SampleFile(e.Bucket, e.Name) {
		return fmt.Errorf("file %q, want %q", e.File, SampleFile(e.Bucket, e.Name))
	}
	if e.TextLen <= 0 || e.TextLen > maxSeqLen {
		return fmt.Errorf("text length %d is not in 1..%d", e.TextLen, maxSeqLen)
	}
	if e.Frames < 1 || (e.Frames-1)%4 != 0 || (e.Frames-1)/4+1 != e.LatentShape[1] {
		return fmt.Errorf("%d frames do not make %d latent frames", e.Frames, e.LatentShape[1])
	}
	return nil
}

// checkName accepts a name usable as one path element.
func checkName(what, s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\`) || strings.ContainsRune(s, 0) || !filepath.IsLocal(s) {
		return fmt.Errorf("%s name %q is not a plain file name", what, s)
	}
	return nil
}

// maxLatentElems bounds one sample's latents (a 1080p clip of 161 frames
// is 16·41·135·240 ≈ 21M values), so a corrupt index cannot make a reader
// allocate without limit.
const maxLatentElems = 1 << 28

func checkLatentShape(s []int, zDim int) error {
	if len(s) != 4 || s[0] != zDim {
		return fmt.Errorf("latent shape %v is not [%d, T, H/8, W/8]", s, zDim)
	}
	n := 1
	for _, d := range s {
		if d <= 0 || d > maxLatentElems {
			return fmt.Errorf("latent shape %v has a bad dimension", s)
		}
		n *= d
		if n > maxLatentElems {
			return fmt.Errorf("latent shape %v is too large", s)
		}
	}
	return nil
}

// WriteIndex writes dir/index.json atomically (temporary file, rename)
// after validating it; an index.json that already holds the same bytes
// is left alone.
func WriteIndex(dir string, idx *Index) error {
	if err := idx.Validate(); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	data = append(data, '\n')
	path := filepath.Join(dir, IndexName)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil // unchanged: a rerun that encodes nothing rewrites nothing
	}
	return writeFileAtomic(path, data)
}

// writeFileAtomic writes data to a temporary file beside path, syncs it
// and renames it to path; on failure the temporary is removed.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644) // CreateTemp makes 0600
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
