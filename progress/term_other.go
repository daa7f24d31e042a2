//go:build !linux

package progress

import "io"

// IsTerminal is only implemented on Linux; elsewhere progress is shown as
// plain lines unless Bars is asked for.
func IsTerminal(w io.Writer) bool { return false }

// terminalColumns is unknown off Linux.
func terminalColumns(w io.Writer) int { return 0 }
