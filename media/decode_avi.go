package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"os"
	"strings"
	"sync"
)

// errAVICodec marks an AVI whose video is not MJPEG: ffmpeg reads it.
var errAVICodec = errors.New("avi codec")

// aviCodecError names the codec the RIFF reader cannot decode.
type aviCodecError struct{ fourcc string }

func (e *aviCodecError) Error() string {
	return fmt.Sprintf("video codec %q is not MJPEG", e.fourcc)
}

func (e *aviCodecError) Is(target error) bool { return target == errAVICodec }

// aviMaxDepth bounds LIST nesting (hdrl > strl, movi > rec): real files
// nest two deep; a hostile file cannot recurse the reader to death.
const aviMaxDepth = 4

// maxDecodePixels bounds a decoded frame (8192×8192): a header may not
// make the reader allocate gigabytes.
const maxDecodePixels = 1 << 26

// aviStream is what the reader learns from the headers.
type aviStream struct {
	width, height int
	video         int    // index of the video stream among the strl lists, -1 if none
	codec         string // strf biCompression, else strh fccHandler
	streams       int
}

// aviReader walks a RIFF AVI held by an io.ReaderAt.
type aviReader struct {
	r         io.ReaderAt
	size      int64
	stream    aviStream
	maxFrames int
	clip      *Clip
	headers   bool // stop after hdrl (Probe)
}

func decodeAVIFile(path string, maxFrames int) (*Clip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	c, err := readAVI(f, st.Size(), maxFrames)
	if errors.Is(err, errAVICodec) {
		// Not MJPEG: ffmpeg decodes it, or says how to get ffmpeg.
		if _, ferr := findFFmpegDecoder(); ferr != nil {
			return nil, fmt.Errorf("%w; ferry reads MJPEG AVIs itself and other codecs only through ffmpeg: install ffmpeg or convert the clip to MJPEG .avi or .gif", err)
		}
		return decodeFFmpegFile(f.Name(), maxFrames)
	}
	return c, err
}

func probeAVI(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	a := &aviReader{r: f, size: st.Size(), headers: true}
	if err := a.read(); err != nil {
		return 0, 0, err
	}
	return a.stream.width, a.stream.height, nil
}

// readAVI decodes up to maxFrames (<= 0: all) MJPEG frames of the first
// video stream. Chunks are read one at a time: a long clip is never held
// whole in memory.
func readAVI(r io.ReaderAt, size int64, maxFrames int) (*Clip, error) {
	a := &aviReader{r: r, size: size, maxFrames: maxFrames}
	if err := a.read(); err != nil {
		return nil, err
	}
	return a.clip, nil
}

var errStop = errors.New("stop")

func (a *aviReader) read() error {
	var hdr [12]byte
	if _, err := a.r.ReadAt(hdr[:], 0); err != nil || string(hdr[:4]) != "RIFF" || string(hdr[8:]) != "AVI " {
		return errors.New("not an AVI file (no RIFF 'AVI ' header)")
	}
	end := min(a.size, 8+int64(binary.LittleEndian.Uint32(hdr[4:])))
	a.stream.video = -1
	err := a.walk(12, end, 0, "")
	if err != nil && err != errStop {
		return err
	}
	if a.stream.video < 0 {
		return errors.New("AVI has no video stream")
	}
	if a.headers {
		return a.checkSize()
	}
	if a.clip == nil || len(a.clip.Frames) == 0 {
		return errors.New("AVI has no video frames")
	}
	return nil
}

func (a *aviReader) checkSize() error {
	s := a.stream
	if s.width <= 0 || s.height <= 0 || s.width > maxSide || s.height > maxSide || s.width*s.height > maxDecodePixels {
		return fmt.Errorf("AVI frame size %dx%d is not valid", s.width, s.height)
	}
	return nil
}

// walk visits the chunks in [start, end); list is the enclosing LIST's type.
func (a *aviReader) walk(start, end int64, depth int, list string) error {
	if depth > aviMaxDepth {
		return errors.New("AVI lists nest too deep")
	}
	var hdr [12]byte
	for pos := start; pos+8 <= end; {
		if _, err := a.r.ReadAt(hdr[:8], pos); err != nil {
			return fmt.Errorf("AVI chunk at byte %d: %w", pos, err)
		}
		id := string(hdr[:4])
		n := int64(binary.LittleEndian.Uint32(hdr[4:8]))
		body := pos + 8
		if body+n > end {
			return fmt.Errorf("AVI chunk %q at byte %d runs past the end of the file (truncated?)", printable(id), pos)
		}
		if err := a.chunk(id, body, n, depth, list); err != nil {
			return err
		}
		pos = body + n + n%2
	}
	return nil
}

// chunk handles one chunk: lists recurse, headers fill the stream, video
// chunks decode.
func (a *aviReader) chunk(id string, body, n int64, depth int, list string) error {
	if id == "LIST" {
		if n < 4 {
			return errors.New("AVI LIST chunk without a type")
		}
		var typ [4]byte
		if _, err := a.r.ReadAt(typ[:], body); err != nil {
			return err
		}
		if string(typ[:]) == "movi" {
			if a.stream.video < 0 {
				return errors.New("AVI has no video stream header before its frames")
			}
			if err := a.checkSize(); err != nil {
				return err
			}
			if a.headers {
				return errStop
			}
			if !isMJPEG(a.stream.codec) {
				return &aviCodecError{fourcc: printable(a.stream.codec)}
			}
		}
		return a.walk(body+4, body+n, depth+1, string(typ[:]))
	}
	switch {
	case list == "hdrl" && id == "avih":
		return a.mainHeader(body, n)
	case list == "strl" && id == "strh":
		return a.streamHeader(body, n)
	case list == "strl" && id == "strf":
		return a.streamFormat(body, n)
	case (list == "movi" || list == "rec ") && a.isVideoChunk(id):
		return a.frame(body, n)
	}
	return nil
}

func (a *aviReader) readBytes(off, n int64, limit int64) ([]byte, error) {
	if n > limit {
		n = limit
	}
	b := make([]byte, n)
	if _, err := a.r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("AVI read at byte %d: %w", off, err)
	}
	return b, nil
}

// mainHeader reads avih's frame size (a fallback for strf's).
func (a *aviReader) mainHeader(off, n int64) error {
	if n < 40 {
		return errors.New("AVI main header is too short")
	}
	b, err := a.readBytes(off, n, 56)
	if err != nil {
		return err
	}
	if a.stream.width == 0 {
		a.stream.width = int(int32(binary.LittleEndian.Uint32(b[32:])))
		a.stream.height = int(int32(binary.LittleEndian.Uint32(b[36:])))
	}
	return nil
}

// streamHeader counts streams and notes the first video one.
func (a *aviReader) streamHeader(off, n int64) error {
	if n < 8 {
		return errors.New("AVI stream header is too short")
	}
	b, err := a.readBytes(off, n, 8)
	if err != nil {
		return err
	}
	a.stream.streams++
	if string(b[:4]) == "vids" && a.stream.video < 0 {
		a.stream.video = a.stream.streams - 1
		a.stream.codec = string(b[4:8])
	}
	return nil
}

// streamFormat reads the video stream's BITMAPINFOHEADER.
func (a *aviReader) streamFormat(off, n int64) error {
	if a.stream.video != a.stream.streams-1 || a.stream.streams == 0 {
		return nil // another stream's format
	}
	if n < 20 {
		return errors.New("AVI video format header is too short")
	}
	b, err := a.readBytes(off, n, 20)
	if err != nil {
		return err
	}
	w := int(int32(binary.LittleEndian.Uint32(b[4:])))
	h := int(int32(binary.LittleEndian.Uint32(b[8:])))
	if h < 0 { // top-down bitmaps store a negative height
		h = -h
	}
	a.stream.width, a.stream.height = w, h
	if c := string(b[16:20]); c != "\x00\x00\x00\x00" {
		a.stream.codec = c
	}
	return nil
}

// isVideoChunk: "NNdc" or "NNdb" for the video stream's number NN.
func (a *aviReader) isVideoChunk(id string) bool {
	want := fmt.Sprintf("%02d", a.stream.video)
	return id[:2] == want && (id[2:] == "dc" || id[2:] == "db")
}

func isMJPEG(fourcc string) bool {
	switch strings.ToUpper(fourcc) {
	case "MJPG", "JPEG", "AVRN", "LJPG", "DMB1":
		return true
	}
	return false
}

// frame decodes one JPEG; an empty chunk repeats the previous frame (the
// AVI convention for a dropped frame).
func (a *aviReader) frame(off, n int64) error {
	if a.clip == nil {
		a.clip = &Clip{Width: a.stream.width, Height: a.stream.height}
	}
	c := a.clip
	if a.maxFrames > 0 && len(c.Frames) >= a.maxFrames {
		return errStop
	}
	i := len(c.Frames)
	if n == 0 {
		if i == 0 {
			return errors.New("AVI frame 0 is empty")
		}
		c.Frames = append(c.Frames, c.Frames[i-1])
		return nil
	}
	data := make([]byte, n)
	if _, err := a.r.ReadAt(data, off); err != nil {
		return fmt.Errorf("AVI frame %d: %w", i, err)
	}
	// The JPEG's own header first: a frame larger than the stream's
	// must not get to allocate.
	data = withHuffmanTables(data)
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err == nil && (cfg.Width != c.Width || cfg.Height != c.Height) {
		return fmt.Errorf("AVI frame %d is %dx%d, the header says %dx%d", i, cfg.Width, cfg.Height, c.Width, c.Height)
	}
	var img image.Image
	if err == nil {
		img, err = jpeg.Decode(bytes.NewReader(data))
	}
	if err != nil {
		return fmt.Errorf("AVI frame %d is not a readable JPEG: %w", i, err)
	}
	if b := img.Bounds(); b.Dx() != c.Width || b.Dy() != c.Height {
		return fmt.Errorf("AVI frame %d is %dx%d, the header says %dx%d", i, b.Dx(), b.Dy(), c.Width, c.Height)
	}
	c.Frames = append(c.Frames, toRGB(img))
	return nil
}

// printable shows a fourcc with unprintable bytes escaped.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x20 && s[i] < 0x7f {
			b.WriteByte(s[i])
		} else {
			fmt.Fprintf(&b, "\\x%02x", s[i])
		}
	}
	return b.String()
}

// Camera MJPEG omits the Huffman tables from its frames: the format fixes
// them to the example tables of ITU T.81 Annex K, which image/jpeg's
// encoder also writes. standardDHT is that encoder's DHT segment.
var standardDHT = sync.OnceValue(func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	img.Set(1, 1, color.RGBA{200, 10, 90, 255})
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		return nil
	}
	start, n := jpegSegment(buf.Bytes(), 0xc4)
	if start < 0 {
		return nil
	}
	return bytes.Clone(buf.Bytes()[start : start+n])
})

// withHuffmanTables returns data with the standard Huffman tables
// inserted before its scan when it defines none; data unchanged otherwise
// (the decoder reports what else is wrong).
func withHuffmanTables(data []byte) []byte {
	if start, _ := jpegSegment(data, 0xc4); start >= 0 {
		return data
	}
	sos, _ := jpegSegment(data, 0xda)
	dht := standardDHT()
	if sos < 0 || dht == nil {
		return data
	}
	out := make([]byte, 0, len(data)+len(dht))
	return append(append(append(out, data[:sos]...), dht...), data[sos:]...)
}

// jpegSegment finds the first marker segment of type marker before the
// scan (or the SOS itself) and returns its offset and length with the
// marker; -1 when absent or the header is malformed.
func jpegSegment(data []byte, marker byte) (int, int) {
	if len(data) < 4 || data[0] != 0xff || data[1] != 0xd8 {
		return -1, 0
	}
	for pos := 2; pos+4 <= len(data); {
		if data[pos] != 0xff {
			return -1, 0
		}
		m := data[pos+1]
		if m == 0xff { // fill byte
			pos++
			continue
		}
		n := 2 + int(binary.BigEndian.Uint16(data[pos+2:]))
		if m == marker {
			return pos, n
		}
		if m == 0xda || pos+n > len(data) {
			return -1, 0
		}
		pos += n
	}
	return -1, 0
}
