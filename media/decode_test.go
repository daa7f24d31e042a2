package media

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// diffBytes is the largest and mean absolute difference of two byte slices.
func diffBytes(t *testing.T, got, want []byte) (int, float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d bytes, want %d", len(got), len(want))
	}
	worst, sum := 0, 0
	for i := range got {
		d := int(got[i]) - int(want[i])
		d = max(d, -d)
		worst = max(worst, d)
		sum += d
	}
	return worst, float64(sum) / float64(len(got))
}

// TestDecodeRoundTrip writes frames with the package's writers and reads
// them back: PNG and few-colour GIF exactly, MJPEG AVI within JPEG's loss.
func TestDecodeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		frames    int
		smooth    bool
		maxFrames int
		wantF     int
		worst     int     // largest allowed |diff|
		mean      float64 // mean allowed |diff|
	}{
		{"a.png", 1, false, 0, 1, 0, 0},
		{"b.gif", 3, false, 0, 3, 0, 0}, // 4x6 pixels: at most 24 colours, kept exactly
		{"c.avi", 5, true, 0, 5, 24, 3},
		{"d.avi", 5, true, 2, 2, 24, 3},
		{"e.gif", 4, false, 3, 3, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newLevels(tc.frames, 4, 6, tc.smooth, 9)
			if tc.name == "c.avi" || tc.name == "d.avi" {
				v = newLevels(tc.frames, 16, 24, true, 9)
			}
			path := filepath.Join(dir, tc.name)
			if err := Write(path, v.floats, v.f, v.h, v.w, 8); err != nil {
				t.Fatal(err)
			}
			w, h, err := Probe(path)
			if err != nil || w != v.w || h != v.h {
				t.Fatalf("Probe: %dx%d, %v; want %dx%d", w, h, err, v.w, v.h)
			}
			c, err := Decode(path, tc.maxFrames)
			if err != nil {
				t.Fatal(err)
			}
			if c.Width != v.w || c.Height != v.h || len(c.Frames) != tc.wantF {
				t.Fatalf("decoded %dx%d, %d frames; want %dx%d, %d", c.Width, c.Height, len(c.Frames), v.w, v.h, tc.wantF)
			}
			for i, fr := range c.Frames {
				worst, mean := diffBytes(t, fr, v.frame(i))
				if worst > tc.worst || mean > tc.mean {
					t.Errorf("frame %d: max |diff| %d, mean %.2f; allowed %d, %.2f", i, worst, mean, tc.worst, tc.mean)
				}
			}
		})
	}
}

// TestDecodeJPEG reads a JPEG exactly as image/jpeg decodes it.
func TestDecodeJPEG(t *testing.T) {
	v := newLevels(1, 16, 16, true, 3)
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := range 16 * 16 {
		copy(img.Pix[4*i:], v.bytes[3*i:3*i+3])
		img.Pix[4*i+3] = 255
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.JPG") // extensions are case-insensitive
	os.WriteFile(path, buf.Bytes(), 0o644)
	ref, err := jpeg.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for y := range 16 {
		for x := range 16 {
			r, g, b, _ := ref.At(x, y).RGBA()
			got := c.Frames[0][(y*16+x)*3:]
			if [3]byte{got[0], got[1], got[2]} != [3]byte{byte(r >> 8), byte(g >> 8), byte(b >> 8)} {
				t.Fatalf("pixel (%d, %d) = %v, image/jpeg %v", x, y, got[:3], [3]uint32{r >> 8, g >> 8, b >> 8})
			}
		}
	}
}

// TestDecodeGIFDisposal: optimised GIFs draw sub-rectangles with
// transparency over the previous frame and dispose them in three ways.
func TestDecodeGIFDisposal(t *testing.T) {
	pal := color.Palette{color.RGBA{0, 0, 0, 0}, color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}}
	full := image.NewPaletted(image.Rect(0, 0, 4, 4), pal)
	for i := range full.Pix {
		full.Pix[i] = 1 // red everywhere
	}
	patch := image.NewPaletted(image.Rect(1, 1, 3, 3), pal)
	patch.Pix = []uint8{2, 0, 0, 2} // blue corners, transparent elsewhere
	g := &gif.GIF{
		Image:    []*image.Paletted{full, patch, patch, patch},
		Delay:    []int{1, 1, 1, 1},
		Disposal: []byte{gif.DisposalNone, gif.DisposalPrevious, gif.DisposalBackground, gif.DisposalNone},
		Config:   image.Config{Width: 4, Height: 4, ColorModel: pal},
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, g); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "opt.gif")
	os.WriteFile(path, buf.Bytes(), 0o644)
	c, err := Decode(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := func(f, x, y int) [3]byte {
		p := c.Frames[f][(y*4+x)*3:]
		return [3]byte{p[0], p[1], p[2]}
	}
	red, blue, black := [3]byte{255, 0, 0}, [3]byte{0, 0, 255}, [3]byte{}
	for _, tc := range []struct {
		frame, x, y int
		want        [3]byte
	}{
		{0, 1, 1, red},
		{1, 1, 1, blue}, {1, 2, 1, red}, {1, 0, 0, red}, // transparent patch pixels show the frame below
		{2, 1, 1, blue}, {2, 2, 2, blue}, // frame 1 was restored, then the patch drawn again
		{3, 1, 1, blue}, {3, 2, 1, black}, {3, 0, 0, red}, // frame 2 cleared its rectangle to the background
	} {
		if got := at(tc.frame, tc.x, tc.y); got != tc.want {
			t.Errorf("frame %d pixel (%d, %d) = %v, want %v", tc.frame, tc.x, tc.y, got, tc.want)
		}
	}
}

// TestDecodeErrors: every unreadable file is one line that names it.
func TestDecodeErrors(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(3, 8, 8, true, 4)
	good := filepath.Join(dir, "good.avi")
	if err := Write(good, v.floats, v.f, v.h, v.w, 8); err != nil {
		t.Fatal(err)
	}
	avi, _ := os.ReadFile(good)
	h264 := bytes.Replace(bytes.Clone(avi), []byte("MJPG"), []byte("H264"), -1)
	noFrames := bytes.ReplaceAll(bytes.Clone(avi), []byte("00dc"), []byte("JUNK")) // frames become junk chunks
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		return p
	}
	for _, tc := range []struct {
		path string
		want string
	}{
		{write("garbage.png", []byte("not a png")), "not a readable image"},
		{write("garbage.jpg", []byte{0xff, 0xd8, 0xff}), "not a readable image"},
		{write("garbage.gif", []byte("GIF89a")), "not a readable GIF"},
		{write("garbage.avi", []byte("RIFF....WAVE")), "not an AVI"},
		{write("truncated.avi", avi[:len(avi)/2]), "truncated"},
		{write("badjpeg.avi", bytes.Replace(bytes.Clone(avi), []byte{0xff, 0xd8}, []byte{0, 0}, 1)), "not a readable JPEG"},
		{write("h264.avi", h264), "install ffmpeg"},
		{write("noframes.avi", noFrames), "no video frames"},
		{write("clip.mp4", []byte("whatever")), "install ffmpeg"},
		{write("clip.webm", nil), "install ffmpeg"},
		{write("notes.bmp", nil), "cannot read"},
		{filepath.Join(dir, "missing.png"), "no such file"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			t.Setenv("PATH", "") // no ffmpeg, whatever this machine has
			_, err := Decode(tc.path, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Decode: %v; want one line naming %s and saying %q", err, tc.path, tc.want)
			}
		})
	}
}

// TestReadPPMStream: the ffmpeg pipe's format, including header comments.
func TestReadPPMStream(t *testing.T) {
	frame := func(hdr string, n int, fill byte) []byte {
		return append([]byte(hdr), bytes.Repeat([]byte{fill}, n)...)
	}
	two := append(frame("P6\n2 1\n255\n", 6, 7), frame("P6 # comment\n2\t1 255\n", 6, 9)...)
	for _, tc := range []struct {
		name      string
		data      []byte
		maxFrames int
		frames    int
		want      string // error text, "" for success
	}{
		{"two frames", two, 0, 2, ""},
		{"limited", two, 1, 1, ""},
		{"empty", nil, 0, 0, ""},
		{"bad magic", frame("P5\n2 1\n255\n", 2, 0), 0, 0, "not a binary PPM"},
		{"16-bit", frame("P6\n2 1\n65535\n", 12, 0), 0, 0, "maxval"},
		{"truncated", frame("P6\n2 1\n255\n", 5, 0), 0, 0, "truncated"},
		{"size changes", append(frame("P6\n2 1\n255\n", 6, 0), frame("P6\n1 2\n255\n", 6, 0)...), 0, 0, "frame 1 is 1x2"},
		{"zero size", frame("P6\n0 1\n255\n", 0, 0), 0, 0, "not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := readPPMStream(bytes.NewReader(tc.data), tc.maxFrames)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || len(c.Frames) != tc.frames {
				t.Fatalf("%v, %d frames; want %d", err, len(c.Frames), tc.frames)
			}
			if tc.frames == 2 && (c.Frames[1][0] != 9 || c.Width != 2 || c.Height != 1) {
				t.Errorf("frame 1 starts %d, size %dx%d", c.Frames[1][0], c.Width, c.Height)
			}
		})
	}
}

// FuzzReadAVI: no input makes the RIFF reader panic, loop or allocate
// beyond the file, and what it accepts is consistent.
func FuzzReadAVI(f *testing.F) {
	v := newLevels(2, 8, 8, true, 1)
	path := filepath.Join(f.TempDir(), "seed.avi")
	if err := Write(path, v.floats, v.f, v.h, v.w, 8); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:100])
	f.Add([]byte("RIFF\x04\x00\x00\x00AVI "))
	nested := []byte("RIFF\x00\x00\x00\x00AVI LIST\x0c\x00\x00\x00hdrlLIST\x00\x00\x00\x00")
	binary.LittleEndian.PutUint32(nested[4:], uint32(len(nested)-8))
	f.Add(nested)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := readAVI(bytes.NewReader(data), int64(len(data)), 4)
		if err != nil {
			return
		}
		if len(c.Frames) == 0 || len(c.Frames) > 4 {
			t.Fatalf("%d frames accepted", len(c.Frames))
		}
		for i, fr := range c.Frames {
			if len(fr) != 3*c.Width*c.Height {
				t.Fatalf("frame %d has %d bytes for %dx%d", i, len(fr), c.Width, c.Height)
			}
		}
	})
}

// FuzzReadPPMStream: the ffmpeg pipe reader never panics and returns
// frames of the size it reports.
func FuzzReadPPMStream(f *testing.F) {
	f.Add([]byte("P6\n2 1\n255\n\x01\x02\x03\x04\x05\x06"))
	f.Add([]byte("P6 #x\n1 1 255 abc"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := readPPMStream(bytes.NewReader(data), 0)
		if err != nil {
			return
		}
		for _, fr := range c.Frames {
			if len(fr) != 3*c.Width*c.Height {
				t.Fatalf("frame of %d bytes for %dx%d", len(fr), c.Width, c.Height)
			}
		}
	})
}

// TestMJPEGWithoutHuffmanTables: camera MJPEG frames leave out the
// standard Huffman tables; the reader supplies them.
func TestMJPEGWithoutHuffmanTables(t *testing.T) {
	v := newLevels(2, 16, 16, true, 8)
	path := filepath.Join(t.TempDir(), "cam.avi")
	if err := Write(path, v.floats, v.f, v.h, v.w, 8); err != nil {
		t.Fatal(err)
	}
	want, err := Decode(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	dht := standardDHT()
	if len(dht) < 4 || dht[1] != 0xc4 || bytes.Count(data, dht) != 2 {
		t.Fatalf("the writer's frames do not hold the standard tables (%d found)", bytes.Count(data, dht))
	}
	// Blank each frame's DHT into a COM segment of the same length, so
	// the RIFF sizes stay right.
	stripped := bytes.ReplaceAll(data, dht, append([]byte{0xff, 0xfe}, dht[2:]...))
	os.WriteFile(path, stripped, 0o644)
	if _, err := jpeg.Decode(bytes.NewReader(stripped[bytes.Index(stripped, []byte{0xff, 0xd8}):])); err == nil {
		t.Fatal("image/jpeg decodes a frame without tables: the test tests nothing")
	}
	got, err := Decode(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Frames {
		if !bytes.Equal(got.Frames[i], want.Frames[i]) {
			t.Fatalf("frame %d differs once its tables are supplied", i)
		}
	}
}

// TestDecodeThroughFFmpeg: an H.264 MP4 (and an MPEG-4 AVI, which the
// RIFF reader hands over) decode through ffmpeg to what was written,
// within the codec's loss. Without ffmpeg (PATH emptied) they are the
// one-line error saying to install it.
func TestDecodeThroughFFmpeg(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(7, 32, 48, true, 2)
	mp4 := filepath.Join(dir, "clip.mp4")
	t.Run("without ffmpeg", func(t *testing.T) {
		t.Setenv("PATH", "")
		for _, p := range []string{filepath.Join(dir, "none.mp4"), filepath.Join(dir, "none.mkv")} {
			os.WriteFile(p, nil, 0o644)
			if _, _, err := Probe(p); err == nil || !strings.Contains(err.Error(), "install ffmpeg") {
				t.Errorf("%s without ffmpeg: %v", p, err)
			}
		}
	})
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		return // what follows needs ffmpeg; the error without it is checked above
	}
	if err := Write(mp4, v.floats, v.f, v.h, v.w, 8); err != nil {
		t.Fatal(err)
	}
	avi := filepath.Join(dir, "mpeg4.avi")
	if out, err := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error", "-i", mp4, "-c:v", "mpeg4", "-q:v", "2", avi).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	for _, tc := range []struct {
		path      string
		maxFrames int
		frames    int
	}{{mp4, 0, 7}, {mp4, 5, 5}, {avi, 3, 3}} {
		w, h, err := Probe(tc.path)
		if err != nil || w != v.w || h != v.h {
			t.Fatalf("Probe %s: %dx%d, %v", tc.path, w, h, err)
		}
		c, err := Decode(tc.path, tc.maxFrames)
		if err != nil {
			t.Fatal(err)
		}
		if c.Width != v.w || c.Height != v.h || len(c.Frames) != tc.frames {
			t.Fatalf("%s: %dx%d, %d frames; want %dx%d, %d", tc.path, c.Width, c.Height, len(c.Frames), v.w, v.h, tc.frames)
		}
		for i, fr := range c.Frames {
			if _, mean := diffBytes(t, fr, v.frame(i)); mean > 6 {
				t.Errorf("%s frame %d: mean |diff| %.2f", tc.path, i, mean)
			} else if i == 0 {
				t.Logf("%s frame 0: mean |diff| %.2f", filepath.Base(tc.path), mean)
			}
		}
	}
	bad := filepath.Join(dir, "bad.mp4")
	os.WriteFile(bad, []byte("garbage"), 0o644)
	if _, err := Decode(bad, 0); err == nil || !strings.Contains(err.Error(), "ffmpeg could not decode") || strings.Contains(err.Error(), "\n") {
		t.Errorf("garbage mp4: %v", err)
	}
}

// TestDecodeData: a video in memory decodes as its file does: an MJPEG AVI
// in place, frame for frame; another container through ffmpeg, whose
// absence is the same one line.
func TestDecodeData(t *testing.T) {
	v := newLevels(5, 16, 24, true, 3)
	path := filepath.Join(t.TempDir(), "c.avi")
	if err := Write(path, v.floats, v.f, v.h, v.w, 8); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, maxFrames := range []int{0, 2} {
		want, err := Decode(path, maxFrames)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeData(data, maxFrames)
		if err != nil {
			t.Fatal(err)
		}
		if got.Width != want.Width || got.Height != want.Height || len(got.Frames) != len(want.Frames) {
			t.Fatalf("max %d: %dx%d, %d frames; the file decodes to %dx%d, %d", maxFrames, got.Width, got.Height, len(got.Frames), want.Width, want.Height, len(want.Frames))
		}
		for i := range got.Frames {
			if !bytes.Equal(got.Frames[i], want.Frames[i]) {
				t.Errorf("max %d: frame %d differs from the file's", maxFrames, i)
			}
		}
	}
	if _, err := DecodeData(data[:len(data)/2], 0); err == nil {
		t.Error("half an AVI decoded")
	}
	t.Setenv("PATH", "")
	if _, err := DecodeData([]byte("\x00\x00\x00\x18ftypisom not really"), 0); err == nil || !strings.Contains(err.Error(), "install ffmpeg") {
		t.Errorf("an mp4 without ffmpeg: %v", err)
	}
}
