package media

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
)

// findFFmpegDecoder locates ffmpeg on PATH for reading, with the one-line
// error a user sees without it.
func findFFmpegDecoder() (string, error) {
	path, err := exec.LookPath("ffmpeg")
	if err != nil {
		return "", errors.New("reading this clip needs ffmpeg on PATH, which was not found; install ffmpeg, or convert the clip to .avi (MJPEG) or .gif, which ferry reads itself")
	}
	return path, nil
}

// decodeFFmpegFile has ffmpeg decode the clip to a stream of binary PPM
// images (raw rgb24 with a size header, so no ffprobe is needed) on its
// stdout, stopping after maxFrames. ffmpeg applies the clip's rotation.
func decodeFFmpegFile(path string, maxFrames int) (*Clip, error) {
	ffmpeg, err := findFFmpegDecoder()
	if err != nil {
		return nil, err
	}
	args := []string{"-hide_banner", "-loglevel", "error", "-nostdin", "-i", filepath.Clean(path)}
	if maxFrames > 0 {
		args = append(args, "-frames:v", strconv.Itoa(maxFrames))
	}
	args = append(args, "-an", "-f", "image2pipe", "-c:v", "ppm", "pipe:1")
	cmd := exec.Command(ffmpeg, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("ffmpeg: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ffmpeg: %w", err)
	}
	c, readErr := readPPMStream(out, maxFrames)
	if readErr != nil {
		cmd.Process.Kill()
	}
	io.Copy(io.Discard, out) // whatever follows: ffmpeg must not block on a full pipe
	waitErr := cmd.Wait()
	switch {
	case readErr != nil && waitErr != nil:
		return nil, fmt.Errorf("ffmpeg could not decode it: %s", lastLine(stderr.String(), waitErr))
	case readErr != nil:
		return nil, readErr
	case waitErr != nil:
		return nil, fmt.Errorf("ffmpeg could not decode it: %s", lastLine(stderr.String(), waitErr))
	}
	return c, nil
}

// readPPMStream reads concatenated binary PPMs (P6, maxval 255), all of
// one size, until EOF or maxFrames (> 0) frames.
func readPPMStream(r io.Reader, maxFrames int) (*Clip, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	c := &Clip{}
	for maxFrames <= 0 || len(c.Frames) < maxFrames {
		if _, err := br.Peek(1); err == io.EOF {
			break
		}
		w, h, err := readPPMHeader(br)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", len(c.Frames), err)
		}
		if len(c.Frames) == 0 {
			c.Width, c.Height = w, h
		} else if w != c.Width || h != c.Height {
			return nil, fmt.Errorf("frame %d is %dx%d, frame 0 %dx%d", len(c.Frames), w, h, c.Width, c.Height)
		}
		pix := make([]byte, 3*w*h)
		if _, err := io.ReadFull(br, pix); err != nil {
			return nil, fmt.Errorf("frame %d: truncated pixels: %w", len(c.Frames), err)
		}
		c.Frames = append(c.Frames, pix)
	}
	return c, nil
}

// readPPMHeader reads "P6", width, height and maxval separated by white
// space (with # comments), then the single white space before the pixels.
func readPPMHeader(br *bufio.Reader) (w, h int, err error) {
	magic := make([]byte, 2)
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != "P6" {
		return 0, 0, errors.New("not a binary PPM (P6) image")
	}
	var v [3]int
	for i := range v {
		if v[i], err = ppmNumber(br); err != nil {
			return 0, 0, err
		}
	}
	w, h = v[0], v[1]
	if v[2] != 255 {
		return 0, 0, fmt.Errorf("PPM maxval %d, want 255", v[2])
	}
	if w <= 0 || h <= 0 || w > maxSide || h > maxSide || w*h > maxDecodePixels {
		return 0, 0, fmt.Errorf("PPM size %dx%d is not valid", w, h)
	}
	return w, h, nil
}

// ppmNumber skips white space and comments, reads a decimal number and
// consumes the one white-space byte that ends it.
func ppmNumber(br *bufio.Reader) (int, error) {
	b, err := br.ReadByte()
	for err == nil && (isPPMSpace(b) || b == '#') {
		if b == '#' {
			if _, err = br.ReadString('\n'); err != nil {
				break
			}
		}
		b, err = br.ReadByte()
	}
	n, digits := 0, 0
	for err == nil && b >= '0' && b <= '9' && digits < 9 {
		n = n*10 + int(b-'0')
		digits++
		b, err = br.ReadByte()
	}
	if err != nil || digits == 0 || !isPPMSpace(b) {
		return 0, errors.New("bad PPM header")
	}
	return n, nil
}

func isPPMSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f'
}
