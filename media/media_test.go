package media

import (
	"errors"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// levels is a test video whose every value is k/255 for a known byte k, so
// the expected 8-bit output is known without the code under test.
type levels struct {
	f, h, w int
	bytes   []uint8   // [F, H, W, 3]
	floats  []float32 // bytes / 255
}

// newLevels makes frames of random bytes, or of smooth gradients (what a
// decoder produces, and what JPEG and GIF are built for) when smooth.
func newLevels(f, h, w int, smooth bool, seed uint64) levels {
	r := rand.New(rand.NewPCG(seed, 2))
	v := levels{f: f, h: h, w: w, bytes: make([]uint8, f*h*w*3), floats: make([]float32, f*h*w*3)}
	for i := range v.bytes {
		if smooth {
			fr, rest := i/(h*w*3), i%(h*w*3)
			y, x, ch := rest/(w*3), rest/3%w, rest%3
			v.bytes[i] = triangle(x*200/w + y*40/h + fr*37 + ch*30)
		} else {
			v.bytes[i] = uint8(r.IntN(256))
		}
		v.floats[i] = float32(v.bytes[i]) / 255
	}
	return v
}

// triangle folds v into 0..255 without jumps (up, then back down).
func triangle(v int) uint8 {
	if v %= 510; v > 255 {
		v = 510 - v
	}
	return uint8(v)
}

// frame returns frame i's bytes.
func (v levels) frame(i int) []uint8 {
	n := v.h * v.w * 3
	return v.bytes[i*n : (i+1)*n]
}

// compareImage returns the largest and mean absolute difference between an
// image and the expected [H, W, 3] bytes.
func compareImage(t *testing.T, img image.Image, want []uint8, w, h int) (maxDiff int, mean float64) {
	t.Helper()
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("image is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	var sum int
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r, g, b, _ := img.At(img.Bounds().Min.X+x, img.Bounds().Min.Y+y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
			for ch := 0; ch < 3; ch++ {
				d := got[ch] - int(want[(y*w+x)*3+ch])
				d = max(d, -d)
				sum += d
				maxDiff = max(maxDiff, d)
			}
		}
	}
	return maxDiff, float64(sum) / float64(w*h*3)
}

// dirEntries lists a directory's names.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestTo8bit(t *testing.T) {
	tests := []struct {
		in   float32
		want uint8
		ok   bool
	}{
		{0, 0, true},
		{1, 255, true},
		{-0.5, 0, true},   // clipped
		{1.5, 255, true},  // clipped
		{0.25, 64, true},  // 63.75 rounds up
		{0.5, 128, true},  // 127.5: half to even is 128
		{0.1, 26, true},   // 25.5 in float32: half to even is 26
		{0.002, 1, true},  // 0.51
		{0.0019, 0, true}, // 0.4845
		{float32(math.NaN()), 0, false},
		{float32(math.Inf(1)), 0, false},
	}
	for _, tt := range tests {
		got, ok := to8bit(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("to8bit(%v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	// Every byte survives the trip through k/255.
	for k := 0; k < 256; k++ {
		if got, _ := to8bit(float32(k) / 255); int(got) != k {
			t.Fatalf("to8bit(%d/255) = %d", k, got)
		}
	}
}

func TestPNGRoundTripIsExact(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(1, 17, 23, false, 1)
	path := filepath.Join(dir, "out.png")
	if err := Write(path, v.floats, 1, v.h, v.w, 16); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	if d, _ := compareImage(t, img, v.frame(0), v.w, v.h); d != 0 {
		t.Fatalf("pixel off by %d", d)
	}
	if got := dirEntries(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v, want only out.png", got)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

func TestPNGFolder(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(3, 8, 12, false, 2)
	out := filepath.Join(dir, "frames") + "/"
	if err := Write(out, v.floats, v.f, v.h, v.w, 16); err != nil {
		t.Fatal(err)
	}
	names := dirEntries(t, filepath.Join(dir, "frames"))
	want := []string{"frame_00000.png", "frame_00001.png", "frame_00002.png"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("folder holds %v, want %v", names, want)
	}
	for i, name := range want {
		img := decodePNG(t, filepath.Join(dir, "frames", name))
		if d, _ := compareImage(t, img, v.frame(i), v.w, v.h); d != 0 {
			t.Fatalf("%s: pixel off by %d", name, d)
		}
	}
	if got := dirEntries(t, dir); len(got) != 1 {
		t.Fatalf("parent holds %v, want only frames", got)
	}
	// The same folder again is refused now that it is not empty.
	if err := Write(out, v.floats, v.f, v.h, v.w, 16); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("second write into the full folder: %v", err)
	}
}

func TestPNGFolderReplacesEmptyFolder(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "frames")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	v := newLevels(2, 4, 4, false, 3)
	if err := Write(target+"/", v.floats, v.f, v.h, v.w, 8); err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, target); len(got) != 2 {
		t.Fatalf("folder holds %v", got)
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(2, 4, 6, false, 4)
	tests := []struct {
		name    string
		path    string
		frames  []float32
		f, h, w int
		fps     float64
		want    string
	}{
		{"png with frames", "a.png", v.floats, 2, 4, 6, 16, "ending in /"},
		{"unknown extension", "a.webm", v.floats, 2, 4, 6, 16, ".png, .gif, .avi, .mp4"},
		{"no extension", "a", v.floats, 2, 4, 6, 16, "no extension"},
		{"short frames", "a.gif", v.floats[1:], 2, 4, 6, 16, "values"},
		{"zero fps", "a.avi", v.floats, 2, 4, 6, 0, "frame rate"},
		{"nan fps", "a.avi", v.floats, 2, 4, 6, math.NaN(), "frame rate"},
		{"bad shape", "a.gif", nil, 0, 4, 6, 16, "shape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Write(filepath.Join(dir, tt.path), tt.frames, tt.f, tt.h, tt.w, tt.fps)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v: want one line mentioning %q", err, tt.want)
			}
			if got := dirEntries(t, dir); len(got) != 0 {
				t.Fatalf("left behind %v", got)
			}
		})
	}
}

func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	full := filepath.Join(dir, "full")
	empty := filepath.Join(dir, "empty")
	for _, err := range []error{
		os.WriteFile(file, []byte("x"), 0o644),
		os.Mkdir(full, 0o755),
		os.WriteFile(filepath.Join(full, "a"), nil, 0o644),
		os.Mkdir(empty, 0o755),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		path   string
		frames int
		want   string // "" for success
	}{
		{"png", "out.png", 1, ""},
		{"PNG upper case", "out.PNG", 1, ""},
		{"gif", "out.gif", 9, ""},
		{"avi", "out.avi", 9, ""},
		{"new folder", "frames/", 9, ""},
		{"empty folder", "empty/", 9, ""},
		{"no extension", "file", 1, "no extension"},
		{"png with frames", "out.png", 9, "folder"},
		{"unknown", "out.mkv", 9, "unknown output extension"},
		{"missing directory", "nope/out.avi", 9, "output directory"},
		{"parent is a file", "file/out.avi", 9, "not a directory"},
		{"full folder", "full/", 9, "not empty"},
		{"folder is a file", "file/", 9, "not a directory"},
		{"no frames", "out.avi", 0, "frames"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := dirEntries(t, dir)
			err := CheckPath(dir+"/"+tt.path, tt.frames) // Join would drop a trailing /
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v: want one mentioning %q", err, tt.want)
			}
			if after := dirEntries(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("CheckPath changed the directory: %v -> %v", before, after)
			}
		})
	}
	if err := os.Mkdir(filepath.Join(dir, "isdir.avi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckPath(filepath.Join(dir, "isdir.avi"), 3); err == nil {
		t.Error("a directory named .avi accepted")
	}
}

func TestMP4WithoutFFmpeg(t *testing.T) {
	t.Setenv("PATH", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "out.mp4")
	if err := CheckPath(path, 3); err == nil || !strings.Contains(err.Error(), "ffmpeg") || !strings.Contains(err.Error(), ".avi") {
		t.Fatalf("CheckPath: %v; want the ffmpeg error suggesting .avi", err)
	}
	v := newLevels(3, 4, 4, false, 5)
	err := Write(path, v.floats, v.f, v.h, v.w, 16)
	if err == nil || !strings.Contains(err.Error(), "ffmpeg") || !strings.Contains(err.Error(), ".avi") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Write: %v; want the one-line ffmpeg error suggesting .avi", err)
	}
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Fatalf("left behind %v", got)
	}
}

// TestFailureLeavesNothing breaks the frames mid-way (a NaN in the third
// frame, found only when that frame is converted) for every format and
// checks that no temporary survives and an existing file is untouched.
func TestFailureLeavesNothing(t *testing.T) {
	v := newLevels(4, 8, 8, true, 6)
	v.floats[2*8*8*3+5] = float32(math.NaN())
	paths := []string{"out.gif", "out.avi", "frames/"}
	if _, err := findFFmpeg(); err == nil {
		paths = append(paths, "out.mp4")
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			path := dir + "/" + p // Join would drop a trailing /
			var old []byte
			if !strings.HasSuffix(p, "/") {
				old = []byte("previous output")
				if err := os.WriteFile(path, old, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := Write(path, v.floats, v.f, v.h, v.w, 8)
			var bad *nonFiniteError
			if !errors.As(err, &bad) || bad.frame != 2 {
				t.Fatalf("error %v, want the NaN in frame 2", err)
			}
			names := dirEntries(t, dir)
			if old == nil && len(names) != 0 {
				t.Fatalf("left behind %v", names)
			}
			if old != nil {
				if len(names) != 1 {
					t.Fatalf("directory holds %v, want only the old file", names)
				}
				if got, _ := os.ReadFile(path); string(got) != string(old) {
					t.Fatalf("existing file changed to %q", got)
				}
			}
		})
	}
}

func TestUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	v := newLevels(2, 4, 4, false, 7)
	for _, p := range []string{"out.avi", "frames/"} {
		if err := Write(dir+"/"+p, v.floats, v.f, v.h, v.w, 8); err == nil {
			t.Errorf("%s: write into a read-only directory succeeded", p)
		}
		if err := CheckPath(dir+"/"+p, v.f); err == nil {
			t.Errorf("%s: CheckPath accepted a read-only directory", p)
		}
	}
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Fatalf("left behind %v", got)
	}
}

func TestMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	v := newLevels(1, 4, 4, false, 8)
	for _, p := range []string{"nope/out.png", "nope/frames/"} {
		if err := Write(dir+"/"+p, v.floats, v.f, v.h, v.w, 8); err == nil {
			t.Errorf("%s: write into a missing directory succeeded", p)
		}
	}
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Fatalf("left behind %v", got)
	}
}

func BenchmarkWrite(b *testing.B) {
	// 8 frames of a 480x832 video (Wan 2.1 480p).
	v := newLevels(8, 480, 832, true, 9)
	for _, p := range []string{"out.avi", "out.gif", "frames/"} {
		b.Run(strings.TrimSuffix(p, "/"), func(b *testing.B) {
			dir := b.TempDir()
			for i := 0; b.Loop(); i++ {
				path := dir + "/" + strings.Repeat("x", i%2+1) + p
				os.RemoveAll(path)
				if err := Write(path, v.floats, v.f, v.h, v.w, 16); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
