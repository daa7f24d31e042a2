//go:build linux

package progress

import (
	"io"

	"golang.org/x/sys/unix"
)

// fdWriter is a writer backed by a file descriptor (*os.File).
type fdWriter interface{ Fd() uintptr }

// IsTerminal reports whether w is a terminal: a file descriptor on which
// the TCGETS ioctl (get terminal attributes) succeeds.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(fdWriter)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalColumns is the terminal's width, 0 when w is not one.
func terminalColumns(w io.Writer) int {
	f, ok := w.(fdWriter)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
