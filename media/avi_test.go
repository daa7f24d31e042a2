package media

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// riffChunk is one parsed RIFF chunk; lists carry their type and children.
type riffChunk struct {
	id       string
	listType string // for RIFF and LIST
	data     []byte // for plain chunks
	offset   int    // of the chunk header in the file
	children []riffChunk
}

// parseRIFF is a small independent RIFF reader: 4-byte id, little-endian
// size, data padded to even length; RIFF and LIST hold a type and chunks.
func parseRIFF(t *testing.T, b []byte, base int) []riffChunk {
	t.Helper()
	var out []riffChunk
	for pos := 0; pos < len(b); {
		if pos+8 > len(b) {
			t.Fatalf("truncated chunk header at %d", base+pos)
		}
		c := riffChunk{id: string(b[pos : pos+4]), offset: base + pos}
		size := int(binary.LittleEndian.Uint32(b[pos+4:]))
		if pos+8+size > len(b) {
			t.Fatalf("chunk %s at %d: size %d past the end", c.id, c.offset, size)
		}
		body := b[pos+8 : pos+8+size]
		if c.id == "RIFF" || c.id == "LIST" {
			c.listType = string(body[:4])
			c.children = parseRIFF(t, body[4:], base+pos+12)
		} else {
			c.data = body
		}
		out = append(out, c)
		pos += 8 + size + size%2
	}
	return out
}

func find(t *testing.T, chunks []riffChunk, id, listType string) riffChunk {
	t.Helper()
	for _, c := range chunks {
		if c.id == id && c.listType == listType {
			return c
		}
	}
	t.Fatalf("no %s %s chunk", id, listType)
	return riffChunk{}
}

func u32(b []byte, off int) int { return int(binary.LittleEndian.Uint32(b[off:])) }

func TestAVIStructure(t *testing.T) {
	v := newLevels(5, 48, 64, true, 1)
	path := filepath.Join(t.TempDir(), "out.avi")
	if err := Write(path, v.floats, v.f, v.h, v.w, 16); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	top := parseRIFF(t, raw, 0)
	if len(top) != 1 || top[0].id != "RIFF" || top[0].listType != "AVI " {
		t.Fatalf("top level is not one RIFF AVI chunk")
	}
	if size := u32(raw, 4); size != len(raw)-8 {
		t.Errorf("RIFF size %d, file has %d bytes after the header", size, len(raw)-8)
	}
	riff := top[0].children
	hdrl := find(t, riff, "LIST", "hdrl")
	avih := find(t, hdrl.children, "avih", "").data
	if got := u32(avih, 16); got != v.f {
		t.Errorf("avih total frames %d, want %d", got, v.f)
	}
	if w, h := u32(avih, 32), u32(avih, 36); w != v.w || h != v.h {
		t.Errorf("avih size %dx%d, want %dx%d", w, h, v.w, v.h)
	}
	if us := u32(avih, 0); us != 62500 {
		t.Errorf("avih %d us per frame, want 62500 for 16 fps", us)
	}
	strl := find(t, hdrl.children, "LIST", "strl")
	strh := find(t, strl.children, "strh", "").data
	if string(strh[0:4]) != "vids" || string(strh[4:8]) != "MJPG" {
		t.Errorf("stream %q/%q, want vids/MJPG", strh[0:4], strh[4:8])
	}
	if scale, rate, length := u32(strh, 20), u32(strh, 24), u32(strh, 32); rate != 16*scale || length != v.f {
		t.Errorf("strh rate %d/%d length %d, want 16 fps and %d frames", rate, scale, length, v.f)
	}
	strf := find(t, strl.children, "strf", "").data
	if w, h, comp := u32(strf, 4), u32(strf, 8), string(strf[16:20]); w != v.w || h != v.h || comp != "MJPG" {
		t.Errorf("strf %dx%d %q", w, h, comp)
	}

	movi := find(t, riff, "LIST", "movi")
	if len(movi.children) != v.f {
		t.Fatalf("movi holds %d chunks, want %d", len(movi.children), v.f)
	}
	idx := find(t, riff, "idx1", "").data
	if len(idx) != 16*v.f {
		t.Fatalf("idx1 has %d bytes, want %d entries", len(idx), v.f)
	}
	moviFourCC := movi.offset + 8
	for i, c := range movi.children {
		e := idx[16*i:]
		if string(e[:4]) != "00dc" || u32(e, 4)&0x10 == 0 {
			t.Errorf("index %d: %q flags %x", i, e[:4], u32(e, 4))
		}
		if off, size := u32(e, 8), u32(e, 12); moviFourCC+off != c.offset || size != len(c.data) {
			t.Errorf("index %d points at %d size %d; chunk is at %d size %d", i, moviFourCC+off, size, c.offset, len(c.data))
		}
		if c.id != "00dc" {
			t.Fatalf("movi chunk %d is %q", i, c.id)
		}
		img, err := jpeg.Decode(bytes.NewReader(c.data))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if _, mean := compareImage(t, img, v.frame(i), v.w, v.h); mean > 3 {
			t.Errorf("frame %d: mean error %.2f levels", i, mean)
		}
	}
}

func TestFrameRate(t *testing.T) {
	tests := []struct {
		fps         float64
		rate, scale uint32
	}{
		{16, 16, 1},
		{24000.0 / 1001, 24000, 1001},
		{30000.0 / 1001, 30000, 1001},
		{12.5, 25, 2},
		{0.5, 1, 2},
	}
	for _, tt := range tests {
		if r, s := frameRate(tt.fps); r != tt.rate || s != tt.scale {
			t.Errorf("frameRate(%v) = %d/%d, want %d/%d", tt.fps, r, s, tt.rate, tt.scale)
		}
	}
}

// ffprobeStream asks ffprobe, when installed, what it decodes in a file.
func ffprobeStream(t *testing.T, path string) (codec string, frames, w, h int) {
	t.Helper()
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffprobe is not on PATH; skipping the external player check")
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,nb_read_frames,width,height", "-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var probe struct {
		Streams []struct {
			Codec  string `json:"codec_name"`
			Frames string `json:"nb_read_frames"`
			Width  int    `json:"width"`
			Height int    `json:"height"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || len(probe.Streams) != 1 {
		t.Fatalf("ffprobe output %s: %v", out, err)
	}
	s := probe.Streams[0]
	n, err := strconv.Atoi(s.Frames)
	if err != nil {
		t.Fatalf("ffprobe frames %q", s.Frames)
	}
	return s.Codec, n, s.Width, s.Height
}

func TestAVIReadByFFprobe(t *testing.T) {
	v := newLevels(7, 36, 52, true, 2)
	path := filepath.Join(t.TempDir(), "out.avi")
	if err := Write(path, v.floats, v.f, v.h, v.w, 16); err != nil {
		t.Fatal(err)
	}
	codec, frames, w, h := ffprobeStream(t, path)
	if codec != "mjpeg" || frames != v.f || w != v.w || h != v.h {
		t.Fatalf("ffprobe reads %s, %d frames, %dx%d; want mjpeg, %d, %dx%d", codec, frames, w, h, v.f, v.w, v.h)
	}
}

func TestMP4WithFFmpeg(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not on PATH; the missing-ffmpeg error is tested separately")
	}
	v := newLevels(6, 33, 47, true, 3) // odd sides: padded to even for yuv420p
	dir := t.TempDir()
	path := filepath.Join(dir, "out.mp4")
	if err := Write(path, v.floats, v.f, v.h, v.w, 12); err != nil {
		t.Fatal(err)
	}
	codec, frames, w, h := ffprobeStream(t, path)
	if codec != "h264" || frames != v.f || w != v.w+1 || h != v.h+1 {
		t.Fatalf("ffprobe reads %s, %d frames, %dx%d; want h264, %d, %dx%d", codec, frames, w, h, v.f, v.w+1, v.h+1)
	}
	if got := dirEntries(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v, want only out.mp4", got)
	}
}
