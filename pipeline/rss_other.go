//go:build !linux

package pipeline

func resetPeakRSS() {}

// peakRSS is unknown off Linux.
func peakRSS() int64 { return 0 }
