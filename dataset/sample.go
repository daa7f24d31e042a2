package dataset

import (
	"fmt"
	"strconv"
	"time"

	"ferry/checkpoint"
	"ferry/dtype"
)

// Tensor names in a sample file.
const (
	LatentsTensor = "latents"
	TextTensor    = "text"
)

// Meta is a sample file's metadata: where the sample came from and how it
// was encoded. A rerun compares it with what it would write (UpToDate).
type Meta struct {
	Name    string
	Source  string    // the clip's file name in the data folder
	ModTime time.Time // the clip's modification time
	Bytes   int64     // the clip's size
	Caption string
	// SourceWidth and SourceHeight are the clip's size; Frames the frames
	// encoded (4k+1).
	SourceWidth, SourceHeight int
	Frames                    int
	Settings                  string // Settings.String()
	Model                     string // the model fingerprint
}

// UpToDate says whether a sample file with metadata m is what encoding
// want's source with want's settings and model would write again.
func (m Meta) UpToDate(want Meta) bool {
	return m.Name == want.Name && m.Source == want.Source && m.ModTime.Equal(want.ModTime) && m.Bytes == want.Bytes &&
		m.Caption == want.Caption && m.Settings == want.Settings && m.Model == want.Model
}

func (m Meta) encode() map[string]string {
	return map[string]string{
		"format":        Format + "/" + strconv.Itoa(Version),
		"name":          m.Name,
		"source":        m.Source,
		"source_mtime":  m.ModTime.UTC().Format(time.RFC3339Nano),
		"source_bytes":  strconv.FormatInt(m.Bytes, 10),
		"caption":       m.Caption,
		"source_width":  strconv.Itoa(m.SourceWidth),
		"source_height": strconv.Itoa(m.SourceHeight),
		"frames":        strconv.Itoa(m.Frames),
		"settings":      m.Settings,
		"model":         m.Model,
	}
}

// decodeMeta reads the metadata back; a file of another format or version
// is an error.
func decodeMeta(kv map[string]string) (Meta, error) {
	if f := kv["format"]; f != Format+"/"+strconv.Itoa(Version) {
		return Meta{}, fmt.Errorf("metadata format %q, want %s/%d", f, Format, Version)
	}
	m := Meta{Name: kv["name"], Source: kv["source"], Caption: kv["caption"], Settings: kv["settings"], Model: kv["model"]}
	var err error
	if m.ModTime, err = time.Parse(time.RFC3339Nano, kv["source_mtime"]); err != nil {
		return Meta{}, fmt.Errorf("metadata source_mtime: %w", err)
	}
	ints := []struct {
		key string
		dst *int
	}{{"source_width", &m.SourceWidth}, {"source_height", &m.SourceHeight}, {"frames", &m.Frames}}
	for _, f := range ints {
		if *f.dst, err = strconv.Atoi(kv[f.key]); err != nil {
			return Meta{}, fmt.Errorf("metadata %s: %w", f.key, err)
		}
	}
	if m.Bytes, err = strconv.ParseInt(kv["source_bytes"], 10, 64); err != nil {
		return Meta{}, fmt.Errorf("metadata source_bytes: %w", err)
	}
	return m, nil
}

// WriteSample writes a sample file atomically: latents [z, T, h, w] and
// text [L, d], float32, with m as metadata.
func WriteSample(path string, m Meta, latents []float32, latentShape []int, text []float32, textShape []int) error {
	if n := product(latentShape); len(latentShape) != 4 || n != len(latents) {
		return fmt.Errorf("write %s: %d latent values for shape %v", path, len(latents), latentShape)
	}
	if n := product(textShape); len(textShape) != 2 || n != len(text) {
		return fmt.Errorf("write %s: %d text values for shape %v", path, len(text), textShape)
	}
	tensors := []checkpoint.RawTensor{
		checkpoint.F32Tensor(LatentsTensor, latentShape, latents),
		checkpoint.F32Tensor(TextTensor, textShape, text),
	}
	return checkpoint.WriteFile(path, tensors, m.encode())
}

// Header is what a sample file says of itself without reading its data.
type Header struct {
	Meta        Meta
	LatentShape []int
	TextShape   []int
}

// ReadHeader reads a sample file's metadata and tensor shapes.
func ReadHeader(path string) (Header, error) {
	f, err := checkpoint.Open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	return header(f)
}

func header(f *checkpoint.File) (Header, error) {
	m, err := decodeMeta(f.Metadata())
	if err != nil {
		return Header{}, fmt.Errorf("%s: %w", f.Path(), err)
	}
	h := Header{Meta: m}
	for _, t := range []struct {
		name string
		rank int
		dst  *[]int
	}{{LatentsTensor, 4, &h.LatentShape}, {TextTensor, 2, &h.TextShape}} {
		info, ok := f.Lookup(t.name)
		if !ok {
			return Header{}, fmt.Errorf("%s: no tensor %q", f.Path(), t.name)
		}
		if info.DType != dtype.F32 || len(info.Shape) != t.rank {
			return Header{}, fmt.Errorf("%s: tensor %q is %s %v, want float32 of rank %d", f.Path(), t.name, info.DType, info.Shape, t.rank)
		}
		*t.dst = append([]int(nil), info.Shape...)
	}
	return h, nil
}

func product(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
