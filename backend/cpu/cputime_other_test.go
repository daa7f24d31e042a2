//go:build !unix

package cpu_test

// cpuSeconds is unavailable here; the cpu-rate metrics are then left out.
func cpuSeconds() float64 { return 0 }
