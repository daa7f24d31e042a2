// Package units reads memory sizes as ferry's flags and request fields
// take them ("8GiB", "512MB", bytes).
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize accepts, longest first so that
// "GiB" is not read as "B".
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize reads a memory size: bytes ("1048576"), or a number with a
// binary (KiB, MiB, GiB, TiB; K, M, G, T) or decimal (KB, MB, GB, TB) unit,
// e.g. "512MiB", "8GiB", "1.5GB". Case-insensitive; no negative sizes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, mult := t, 1.0
	for _, u := range sizeUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad size %q (use bytes or a unit: 512MiB, 8GiB, 8GB)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("bad size %q: sizes cannot be negative", s)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return int64(b), nil
}
