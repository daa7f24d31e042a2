package media

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"io"
	"math"
)

// AVI (RIFF) with one MJPEG video stream, the layout every player reads:
//
//	RIFF 'AVI '
//	  LIST 'hdrl'
//	    avih                  MainAVIHeader
//	    LIST 'strl'
//	      strh                AVIStreamHeader ('vids', 'MJPG')
//	      strf                BITMAPINFOHEADER ('MJPG')
//	  LIST 'movi'
//	    00dc ...              one JPEG per frame, padded to even size
//	  idx1                    one entry per frame, offsets from 'movi'
//
// The header has a fixed size, so it is written first with zero sizes and
// rewritten once the frames are known.

// JPEGQuality is the quality of each MJPEG frame.
const JPEGQuality = 90

// aviLimit keeps a file inside RIFF AVI 1.0, whose readers stop at 1 GiB
// (larger files need the OpenDML extension).
const aviLimit = 1 << 30

const (
	avihSize   = 56
	strhSize   = 56
	strfSize   = 40
	strlSize   = 4 + 8 + strhSize + 8 + strfSize
	hdrlSize   = 4 + 8 + avihSize + 8 + strlSize
	headerSize = 12 + 8 + hdrlSize + 12 // RIFF, hdrl list, movi list header
	moviFourCC = headerSize - 4         // idx1 offsets count from here
)

// AVI header flags and index flags.
const (
	avifHasIndex      = 0x10
	avifIsInterleaved = 0x100
	aviifKeyframe     = 0x10
)

// aviIndexEntry is one idx1 entry.
type aviIndexEntry struct{ offset, size uint32 }

// aviTotals are what the header needs from the written frames.
type aviTotals struct {
	frames    int
	maxChunk  int
	moviBytes int // the movi list's content after the 'movi' fourcc
	fileBytes int
}

// writeAVI writes c as an MJPEG AVI to f, which must support WriteAt (the
// header is rewritten at the end).
func writeAVI(f interface {
	io.Writer
	io.WriterAt
}, c *clip) error {
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := bw.Write(make([]byte, headerSize)); err != nil {
		return fmt.Errorf("media: write avi: %w", err)
	}
	index, totals, err := writeAVIFrames(bw, c)
	if err != nil {
		return err
	}
	idx := aviIndex(index)
	// headerSize ends with the 'movi' fourcc that moviBytes also counts.
	totals.fileBytes = headerSize - 4 + totals.moviBytes + len(idx)
	if totals.fileBytes > aviLimit {
		return fmt.Errorf("media: AVI would be %d MiB, over the 1 GiB AVI 1.0 limit; write .mp4 or fewer frames", totals.fileBytes>>20)
	}
	if _, err := bw.Write(idx); err != nil {
		return fmt.Errorf("media: write avi: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("media: write avi: %w", err)
	}
	if _, err := f.WriteAt(aviHeader(c, totals), 0); err != nil {
		return fmt.Errorf("media: write avi header: %w", err)
	}
	return nil
}

// writeAVIFrames encodes and writes the 00dc chunks.
func writeAVIFrames(w io.Writer, c *clip) ([]aviIndexEntry, aviTotals, error) {
	img := c.newRGBA()
	var buf bytes.Buffer
	index := make([]aviIndexEntry, 0, c.f)
	t := aviTotals{frames: c.f}
	offset := 4 // the first chunk follows the 'movi' fourcc
	for i := 0; i < c.f; i++ {
		if err := c.frame(i, img); err != nil {
			return nil, t, err
		}
		buf.Reset()
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return nil, t, fmt.Errorf("media: encode frame %d: %w", i, err)
		}
		n := buf.Len()
		if offset+8+n > aviLimit {
			return nil, t, fmt.Errorf("media: AVI passes the 1 GiB AVI 1.0 limit at frame %d; write .mp4 or fewer frames", i)
		}
		if err := writeChunk(w, "00dc", buf.Bytes()); err != nil {
			return nil, t, err
		}
		index = append(index, aviIndexEntry{offset: uint32(offset), size: uint32(n)})
		offset += 8 + n + n%2
		t.maxChunk = max(t.maxChunk, n)
	}
	t.moviBytes = offset
	return index, t, nil
}

// writeChunk writes a RIFF chunk: id, the data's length, the data, and a
// pad byte when the length is odd (the size field excludes the pad).
func writeChunk(w io.Writer, id string, data []byte) error {
	var hdr [8]byte
	copy(hdr[:4], id)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(data)))
	if _, err := w.Write(hdr[:]); err != nil {
		return fmt.Errorf("media: write avi: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("media: write avi: %w", err)
	}
	if len(data)%2 == 1 {
		if _, err := w.Write([]byte{0}); err != nil {
			return fmt.Errorf("media: write avi: %w", err)
		}
	}
	return nil
}

func aviIndex(entries []aviIndexEntry) []byte {
	b := le{}
	b.fourcc("idx1")
	b.u32(uint32(16 * len(entries)))
	for _, e := range entries {
		b.fourcc("00dc")
		b.u32(aviifKeyframe)
		b.u32(e.offset)
		b.u32(e.size)
	}
	return b.buf
}

// aviHeader is the RIFF header through the 'movi' list header.
func aviHeader(c *clip, t aviTotals) []byte {
	rate, scale := frameRate(c.fps)
	b := le{}
	b.fourcc("RIFF")
	b.u32(uint32(t.fileBytes - 8))
	b.fourcc("AVI ")
	b.fourcc("LIST")
	b.u32(hdrlSize)
	b.fourcc("hdrl")

	b.fourcc("avih")
	b.u32(avihSize)
	b.u32(uint32(math.Round(1e6 / c.fps))) // microseconds per frame
	b.u32(uint32(math.Ceil(float64(t.maxChunk) * c.fps)))
	b.u32(0) // padding granularity
	b.u32(avifHasIndex | avifIsInterleaved)
	b.u32(uint32(t.frames))
	b.u32(0) // initial frames
	b.u32(1) // streams
	b.u32(uint32(t.maxChunk + 8))
	b.u32(uint32(c.w))
	b.u32(uint32(c.h))
	b.zeros(16)

	b.fourcc("LIST")
	b.u32(strlSize)
	b.fourcc("strl")
	b.fourcc("strh")
	b.u32(strhSize)
	b.fourcc("vids")
	b.fourcc("MJPG")
	b.u32(0) // flags
	b.u16(0) // priority
	b.u16(0) // language
	b.u32(0) // initial frames
	b.u32(scale)
	b.u32(rate)
	b.u32(0) // start
	b.u32(uint32(t.frames))
	b.u32(uint32(t.maxChunk + 8))
	b.u32(math.MaxUint32) // quality: default
	b.u32(0)              // sample size: varies
	b.u16(0)              // rcFrame left, top, right, bottom
	b.u16(0)
	b.u16(uint16(c.w))
	b.u16(uint16(c.h))

	b.fourcc("strf")
	b.u32(strfSize)
	b.u32(strfSize) // biSize
	b.u32(uint32(c.w))
	b.u32(uint32(c.h))
	b.u16(1)  // planes
	b.u16(24) // bits per pixel once decoded
	b.fourcc("MJPG")
	b.u32(uint32(c.w * c.h * 3))
	b.zeros(16) // pixels per metre x/y, colours used, important

	b.fourcc("LIST")
	b.u32(uint32(t.moviBytes))
	b.fourcc("movi")
	return b.buf
}

// frameRate expresses fps as rate/scale: exact for whole rates and the
// NTSC family (24000/1001, 30000/1001, ...), else to a thousandth.
func frameRate(fps float64) (rate, scale uint32) {
	for _, s := range []float64{1, 1001} {
		r := math.Round(fps * s)
		if math.Abs(r/s-fps) < 1e-9*fps && (s == 1 || math.Mod(r, 1000) == 0) {
			return uint32(r), uint32(s)
		}
	}
	r := uint32(math.Round(fps * 1000))
	s := uint32(1000)
	g := gcd(r, s)
	return r / g, s / g
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return max(a, 1)
}

// le builds little-endian binary records.
type le struct{ buf []byte }

func (b *le) fourcc(s string) { b.buf = append(b.buf, s[:4]...) }
func (b *le) u32(v uint32)    { b.buf = binary.LittleEndian.AppendUint32(b.buf, v) }
func (b *le) u16(v uint16)    { b.buf = binary.LittleEndian.AppendUint16(b.buf, v) }
func (b *le) zeros(n int)     { b.buf = append(b.buf, make([]byte, n)...) }
