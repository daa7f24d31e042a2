//go:build linux

package pipeline

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS starts a new peak-RSS window (Linux: "5" to clear_refs resets
// VmHWM), so a run in a long-lived process measures its own peak.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is VmHWM, the high-water mark of resident memory, in bytes.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
