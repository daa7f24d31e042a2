package imageproc

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromImage: alpha is dropped, not composited, grey is replicated and
// palettes are looked up, as Pillow's convert("RGB") does.
func TestFromImage(t *testing.T) {
	nrgba := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	nrgba.SetNRGBA(0, 0, color.NRGBA{200, 100, 50, 0}) // fully transparent keeps its colour
	nrgba.SetNRGBA(1, 0, color.NRGBA{10, 20, 30, 128})
	gray := image.NewGray(image.Rect(0, 0, 2, 1))
	gray.Pix = []uint8{7, 250}
	pal := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.NRGBA{1, 2, 3, 255}, color.NRGBA{9, 8, 7, 0}})
	pal.Pix = []uint8{1, 0}
	g16 := image.NewNRGBA64(image.Rect(0, 0, 1, 1))
	g16.SetNRGBA64(0, 0, color.NRGBA64{0x12ff, 0xab01, 0x0080, 0xffff})
	for _, c := range []struct {
		name string
		img  image.Image
		want []uint8
	}{
		{"nrgba", nrgba, []uint8{200, 100, 50, 10, 20, 30}},
		{"gray", gray, []uint8{7, 7, 7, 250, 250, 250}},
		{"paletted", pal, []uint8{9, 8, 7, 1, 2, 3}},
		{"16-bit keeps the high byte", g16, []uint8{0x12, 0xab, 0x00}},
	} {
		got := FromImage(c.img)
		if string(got.Pix) != string(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got.Pix, c.want)
		}
	}
}

// TestRGBA: RGBA is opaque and FromImage's inverse.
func TestRGBA(t *testing.T) {
	m, err := NewRGB(3, 2, []uint8{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18})
	if err != nil {
		t.Fatal(err)
	}
	img := m.RGBA()
	if b := img.Bounds(); b.Dx() != 3 || b.Dy() != 2 || !img.Opaque() {
		t.Fatalf("%v, opaque %v", b, img.Opaque())
	}
	if back := FromImage(img); string(back.Pix) != string(m.Pix) {
		t.Errorf("round trip %v, want %v", back.Pix, m.Pix)
	}
}

func TestLoad(t *testing.T) {
	img, err := Load(filepath.Join("testdata", "wan21_i2v_image.png"))
	if err != nil {
		t.Fatal(err)
	}
	if img.Width != 48 || img.Height != 32 {
		t.Fatalf("got %v, want 48x32", img)
	}
	dir := t.TempDir()
	src := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	src.SetNRGBA(0, 0, color.NRGBA{90, 80, 70, 0})
	path := filepath.Join(dir, "clear.png")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, src); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Pix) != string([]uint8{90, 80, 70}) {
		t.Errorf("transparent pixel read as %v, want its colour 90 80 70", got.Pix)
	}
	for _, c := range []struct{ path, mention string }{
		{filepath.Join(dir, "missing.png"), "no such file"},
		{filepath.Join(dir, "clip.webp"), "cannot read"},
		{filepath.Join("testdata", "clip_cases.json"), "cannot read"},
	} {
		if _, err := Load(c.path); err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %v, want one mentioning %q", c.path, err, c.mention)
		}
	}
	bad := filepath.Join(dir, "bad.png")
	if err := os.WriteFile(bad, []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "not a readable image") {
		t.Errorf("garbage PNG: %v", err)
	}
}

// TestLoadRefusesHugeHeaders: a PNG of a few bytes whose header claims a
// huge image is refused from its header, before the decoder allocates the
// image (60000x60000 took 14 GB and crashed before).
func TestLoadRefusesHugeHeaders(t *testing.T) {
	for _, c := range []struct{ w, h uint32 }{{60000, 60000}, {70000, 10}, {10, 70000}, {8193, 8192}} {
		path := filepath.Join(t.TempDir(), "huge.png")
		if err := os.WriteFile(path, pngHeader(c.w, c.h), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%dx%d: error %v, want too large", c.w, c.h, err)
		}
	}
}

// pngHeader is a PNG whose IHDR says w x h RGB pixels, followed by a
// little image data and the end chunk.
func pngHeader(w, h uint32) []byte {
	chunk := func(kind string, data []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		out = append(out, kind...)
		out = append(out, data...)
		return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(append([]byte(kind), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 64))
	zw.Close()
	out := []byte("\x89PNG\r\n\x1a\n")
	out = append(out, chunk("IHDR", ihdr)...)
	out = append(out, chunk("IDAT", z.Bytes())...)
	return append(out, chunk("IEND", nil)...)
}

// TestDecode: an upload decodes as the same file loads, PNG and JPEG told
// apart by their first bytes; garbage and huge headers are refused.
func TestDecode(t *testing.T) {
	for _, name := range []string{"wan21_i2v_image.png"} {
		path := filepath.Join("testdata", name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if got.Width != want.Width || got.Height != want.Height || string(got.Pix) != string(want.Pix) {
			t.Errorf("%s: Decode differs from Load", name)
		}
	}
	var jpg bytes.Buffer
	src := image.NewRGBA(image.Rect(0, 0, 8, 4))
	if err := jpeg.Encode(&jpg, src, nil); err != nil {
		t.Fatal(err)
	}
	if img, err := Decode(jpg.Bytes()); err != nil || img.Width != 8 || img.Height != 4 {
		t.Errorf("JPEG: %v, %v", img, err)
	}
	for _, c := range []struct {
		data    []byte
		mention string
	}{
		{[]byte("GIF89a"), "not a PNG or JPEG"},
		{nil, "not a PNG or JPEG"},
		{pngHeader(60000, 60000), "too large"},
		{[]byte("\x89PNG\r\n\x1a\nrest"), "not a readable image"},
	} {
		if _, err := Decode(c.data); err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%q: error %v, want one mentioning %q", c.data[:min(len(c.data), 12)], err, c.mention)
		}
	}
}

// FuzzDecode: any bytes decode to an image or an error, never a panic or
// an allocation the header did not allow.
func FuzzDecode(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "wan21_i2v_image.png"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(pngHeader(3, 2))
	f.Add([]byte{0xff, 0xd8, 0xff, 0xe0})
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := Decode(b)
		if err == nil && (img.Width <= 0 || img.Height <= 0 || len(img.Pix) != 3*img.Width*img.Height) {
			t.Fatalf("decoded %dx%d with %d samples", img.Width, img.Height, len(img.Pix))
		}
	})
}
