package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"ferry/dtype"
)

// benchFile writes a file with one BF16 tensor "w" of [rows, width].
func benchFile(b *testing.B, rows, width int) (*File, TensorInfo) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	data := make([]byte, rows*width*2)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if err := WriteFile(path, []RawTensor{{Name: "w", DType: dtype.BF16, Shape: []int{rows, width}, Data: data}}, nil); err != nil {
		b.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	info, _ := f.Lookup("w")
	return f, info
}

// BenchmarkRead compares the two read paths on a 32 MiB tensor whose pages
// are in the page cache: pread into a reused buffer, and a copy out of the
// mapping (what an upcast from the mapping would read).
func BenchmarkRead(b *testing.B) {
	f, info := benchFile(b, 4096, 4096)
	dst := make([]byte, info.Size)
	b.Run("pread", func(b *testing.B) {
		b.SetBytes(info.Size)
		for b.Loop() {
			if err := f.ReadAt(info, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mmap-copy", func(b *testing.B) {
		b.SetBytes(info.Size)
		for b.Loop() {
			m, err := f.Bytes(info)
			if err != nil {
				b.Fatal(err)
			}
			copy(dst, m)
		}
	})
}

// BenchmarkReadRows gathers 512 random rows of a [16384, 4096] BF16 table
// (8 KiB rows), as the text encoder's embedding lookup does.
func BenchmarkReadRows(b *testing.B) {
	f, info := benchFile(b, 16384, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([]int, 512)
	for i := range rows {
		rows[i] = rng.IntN(16384)
	}
	dst := make([]byte, len(rows)*4096*2)
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		if err := f.ReadRows(info, rows, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseHeader parses a header of 1200 tensors, about the size of
// Wan 2.1 14B's transformer index.
func BenchmarkParseHeader(b *testing.B) {
	var infos []TensorInfo
	for i := range 1200 {
		infos = append(infos, TensorInfo{Name: fmt.Sprintf("blocks.%d.attn1.to_q.weight", i), DType: dtype.BF16, Shape: []int{5120, 5120}})
	}
	_, hdr, err := planLayout("bench", infos, map[string]string{"format": "pt"})
	if err != nil {
		b.Fatal(err)
	}
	// Only the header is stored; the data section exists only in size.
	size := infos[0].Elements()*2*int64(len(infos)) + int64(len(hdr))
	r := bytes.NewReader(hdr)
	b.SetBytes(int64(len(hdr)))
	for b.Loop() {
		if _, err := parseHeader("bench", r, size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriter streams 64 MiB through the Writer in 1 MiB pieces.
func BenchmarkWriter(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 1<<20)
	dir := b.TempDir()
	b.SetBytes(size)
	for b.Loop() {
		w, err := NewWriter(filepath.Join(dir, "w.safetensors"), []TensorInfo{{Name: "w", DType: dtype.BF16, Shape: []int{size / 2}}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		tw, _ := w.Next("w")
		for range size / len(chunk) {
			if _, err := tw.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
