package server

import (
	"math"
	"strconv"
	"strings"
)

// sizeMult are the units a request's budgets take (as ferry's flags).
var sizeMult = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// parseSize reads "8GiB", "512MB" or bytes; ok false on anything else.
func parseSize(s string) (int64, bool) {
	t := strings.TrimSpace(s)
	num, mult := t, 1.0
	for _, u := range sizeMult {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*mult >= math.MaxInt64 {
		return 0, false
	}
	return int64(v * mult), true
}
