//go:build !linux

package trace

// residentBytes is not implemented off Linux; SampleRSS records nothing.
func residentBytes() (int64, bool) { return 0, false }
