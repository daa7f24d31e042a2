package cpu

import "testing"

func TestParseBuddyInfo(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{"empty", "", 0},
		{"one zone, orders 0 and 8", "Node 0, zone   Normal      256      0      0      0      0      0      0      0      2      5    100\n", mib + 2*mib},
		{"orders from 9 up are not fragments", "Node 0, zone      DMA      0      0      0      0      0      0      0      0      0      1      3\n", 0},
		{"zones add up", "Node 0, zone    DMA32      1      0\nNode 0, zone   Normal      3      1\n", 4*4096 + 8192},
		{"a line without counts counts nothing", "Node 0, zone   Normal\nNode 0, zone   DMA32      2\n", 2 * 4096},
		{"a line with a bad count counts nothing", "Node 0, zone   Normal   12   x   4\nNode 0, zone   DMA32      2\n", 2 * 4096},
		{"negative counts are refused", "Node 0, zone   Normal   -5\n", 0},
		{"not buddyinfo", "MemTotal: 123 kB\n", 0},
	}
	for _, tc := range tests {
		if got := parseBuddyInfo([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: %d bytes, want %d", tc.name, got, tc.want)
		}
	}
}

func FuzzParseBuddyInfo(f *testing.F) {
	f.Add([]byte("Node 0, zone   Normal   2022   2265   1811   1559   1239    820    467    284    140    176   4964\n"))
	f.Add([]byte("Node 0, zone\n zone zone 1 2 3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if n := parseBuddyInfo(data); n < 0 {
			t.Fatalf("%d bytes of fragments from %q", n, data)
		}
	})
}
