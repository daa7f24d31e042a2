package units

import "testing"

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"512MiB", 512 << 20, true},
		{"8GiB", 8 << 30, true},
		{"8GB", 8e9, true},
		{"8gb", 8e9, true},
		{"1.5GiB", 3 << 29, true},
		{"64K", 64 << 10, true},
		{"100B", 100, true},
		{" 2 GiB ", 2 << 30, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1GiB", 0, false},
		{"12XB", 0, false},
		{"NaN", 0, false},
		{"1e30TB", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "512MiB", "8GB", "1.5G", "-3", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseSize(s); err == nil && v < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, v)
		}
	})
}
