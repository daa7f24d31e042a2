//go:build linux

package trace

import (
	"bytes"
	"os"
	"strconv"
)

// residentBytes reads the current RSS from /proc/self/statm (its second
// field, in pages). Unlike VmHWM this is the value now, so the chart shows
// RSS falling when memory is released.
func residentBytes() (int64, bool) {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	fields := bytes.Fields(data)
	if len(fields) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
