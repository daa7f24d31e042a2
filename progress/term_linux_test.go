//go:build linux

package progress

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair's secondary side: a real terminal
// for IsTerminal to recognise.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	unlock := 0
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ptmx.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlock pty: %v", e)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}

func TestIsTerminal(t *testing.T) {
	pts := openPTY(t)
	if !IsTerminal(pts) {
		t.Error("a pty is not recognised as a terminal")
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 123}); err != nil {
		t.Fatal(err)
	}
	if c := terminalColumns(pts); c != 123 {
		t.Errorf("columns %d, want 123", c)
	}
	t.Setenv("TERM", "xterm")
	if m := New(pts, Auto).Mode(); m != Bars {
		t.Errorf("auto on a terminal: %v, want bars", m)
	}
	t.Setenv("TERM", "dumb")
	if m := New(pts, Auto).Mode(); m != Lines {
		t.Errorf("auto on a dumb terminal: %v, want lines", m)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) {
		t.Error("a pipe is taken for a terminal")
	}
}
