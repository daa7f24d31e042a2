package cpu

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSmallPagesFirst: with SmallPagesFirst, a segment the fragments hold
// is mapped without huge-page advice; one they do not hold, or any segment
// without it, is advised huge pages.
func TestSmallPagesFirst(t *testing.T) {
	if !HugePages {
		t.Skip("huge pages are off here (FERRY_HUGEPAGES=0)")
	}
	const size = 4 << 20
	tests := []struct {
		name      string
		fragments func() int64
		huge      bool
	}{
		{"not asked", nil, true},
		{"fragments hold it", func() int64 { return 1 << 40 }, false},
		{"fragments too small", func() int64 { return size }, true},
	}
	for _, tc := range tests {
		d := NewDevice(0)
		if tc.fragments != nil {
			d.SmallPagesFirst(tc.fragments)
		}
		buf, err := d.Alloc(size, "seg")
		if err != nil {
			t.Fatal(err)
		}
		flags, err := vmFlags(uintptr(buf.Ptr))
		if err != nil {
			t.Skip(err)
		}
		if got := strings.Contains(" "+flags+" ", " hg "); got != tc.huge {
			t.Errorf("%s: huge-page advice %v (VmFlags %q), want %v", tc.name, got, flags, tc.huge)
		}
		buf.Free()
		d.EmptyCache()
	}
}

// vmFlags reads the VmFlags line of the mapping holding addr from
// /proc/self/smaps.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && !strings.HasSuffix(f[0], ":") {
			// A mapping's header: "7f12...-7f12... rw-p 00000000 00:00 0".
			var lo, hi uintptr
			if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err == nil {
				in = lo <= addr && addr < hi
			}
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	return "", fmt.Errorf("no mapping holds %#x in /proc/self/smaps", addr)
}
