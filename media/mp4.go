package media

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// findFFmpeg locates ffmpeg on PATH, with the one-line error the CLI shows.
func findFFmpeg() (string, error) {
	path, err := exec.LookPath("ffmpeg")
	if err != nil {
		return "", errors.New("media: writing .mp4 needs ffmpeg on PATH, which was not found; write .avi instead (MJPEG, plays in ffmpeg and VLC) or install ffmpeg")
	}
	return path, nil
}

// CanWriteMP4 reports whether .mp4 can be written here (ffmpeg on PATH);
// callers that may choose the container fall back to .avi without it.
func CanWriteMP4() bool {
	_, err := findFFmpeg()
	return err == nil
}

// writeMP4 pipes the frames as raw rgb24 into ffmpeg, which encodes H.264
// (yuv420p, the pixel format every player takes) into a temporary file
// renamed into place on success.
func writeMP4(path string, c *clip) error {
	ffmpeg, err := findFFmpeg()
	if err != nil {
		return err
	}
	return writeAtomic(path, func(tmp *os.File) error {
		// ffmpeg opens the path itself; our handle stays open for cleanup.
		return runFFmpeg(ffmpeg, tmp.Name(), c)
	})
}

// ffmpegArgs builds the encoder command line. yuv420p needs even sides, so
// an odd width or height is padded by one black line.
func ffmpegArgs(out string, c *clip) []string {
	args := []string{
		"-hide_banner", "-loglevel", "error", "-nostdin", "-y",
		"-f", "rawvideo", "-pix_fmt", "rgb24",
		"-s", fmt.Sprintf("%dx%d", c.w, c.h),
		"-r", strconv.FormatFloat(c.fps, 'g', -1, 64),
		"-i", "pipe:0",
	}
	if c.w%2 == 1 || c.h%2 == 1 {
		args = append(args, "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2")
	}
	return append(args, "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-f", "mp4", out)
}

func runFFmpeg(ffmpeg, out string, c *clip) error {
	cmd := exec.Command(ffmpeg, ffmpegArgs(out, c)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("media: ffmpeg: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("media: start ffmpeg: %w", err)
	}
	feedErr := feedFrames(stdin, c)
	var bad *nonFiniteError
	if errors.As(feedErr, &bad) {
		// Bad input, not an ffmpeg problem: stop it and say why.
		cmd.Process.Kill()
		stdin.Close()
		cmd.Wait()
		return feedErr
	}
	closeErr := stdin.Close()
	waitErr := cmd.Wait()
	switch { // a write error on the pipe is a symptom: ffmpeg's message says why
	case waitErr != nil:
		return fmt.Errorf("media: ffmpeg failed: %s", lastLine(stderr.String(), waitErr))
	case feedErr != nil:
		return feedErr
	case closeErr != nil:
		return fmt.Errorf("media: ffmpeg input: %w", closeErr)
	}
	return nil
}

// feedFrames writes every frame as packed rgb24.
func feedFrames(w interface{ Write([]byte) (int, error) }, c *clip) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	rgb := make([]byte, c.h*c.w*3)
	for i := 0; i < c.f; i++ {
		if err := c.frameRGB(i, rgb); err != nil {
			return err
		}
		if _, err := bw.Write(rgb); err != nil {
			return fmt.Errorf("media: ffmpeg input: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("media: ffmpeg input: %w", err)
	}
	return nil
}

// lastLine is the last non-empty line of ffmpeg's stderr (its error), or
// the exit status when it printed nothing.
func lastLine(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return err.Error()
}
