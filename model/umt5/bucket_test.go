package umt5

import "testing"

func TestRelativeBucket(t *testing.T) {
	// The bidirectional table of T5's defaults (32 buckets, distance 128):
	// keys before the query in 0..15, after it in 16..31; exact up to 7,
	// then 8-11 -> 8, 12-15 -> 9, 16-22 -> 10, 23-31 -> 11, 32-45 -> 12,
	// 46-63 -> 13, 64-90 -> 14, 91+ -> 15. 16, 32 and 64 sit exactly on a
	// boundary: log(n/8)/log(16)*8 is 2, 4, 6 only in exact arithmetic.
	want := map[int]int32{
		0: 0, 1: 1, 7: 7, 8: 8, 11: 8, 12: 9, 15: 9, 16: 10, 22: 10, 23: 11, 31: 11,
		32: 12, 45: 12, 46: 13, 63: 13, 64: 14, 90: 14, 91: 15, 128: 15, 1000: 15,
	}
	for dist, b := range want {
		if got := relativeBucket(-dist, 32, 128); got != b {
			t.Errorf("bucket(-%d) = %d, want %d", dist, got, b)
		}
		if dist == 0 {
			continue
		}
		if got := relativeBucket(dist, 32, 128); got != b+16 {
			t.Errorf("bucket(+%d) = %d, want %d", dist, got, b+16)
		}
	}
}

func TestRelativeBucketSmallTable(t *testing.T) {
	// The t5_encoder golden's 8 buckets, distance 20: 4 per direction, 2 exact,
	// then log(n/2)/log(10)*2 -> 2 for 2..6, 3 from 7 (2·√10 ≈ 6.32).
	tests := []struct {
		rel  int
		want int32
	}{{0, 0}, {-1, 1}, {1, 5}, {-2, 2}, {-6, 2}, {-7, 3}, {6, 6}, {7, 7}, {-31, 3}, {31, 7}}
	for _, tt := range tests {
		if got := relativeBucket(tt.rel, 8, 20); got != tt.want {
			t.Errorf("bucket(%d) = %d, want %d", tt.rel, got, tt.want)
		}
	}
}

func TestBucketIDs(t *testing.T) {
	ids := bucketIDs(3, 32, 128)
	want := []int32{0, 17, 18, 1, 0, 17, 2, 1, 0}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("bucketIDs(3) = %v, want %v", ids, want)
		}
	}
}

func TestBucketIDsMatchRelativeBucket(t *testing.T) {
	for _, n := range []int{1, 2, 7, 40} {
		ids := bucketIDs(n, 32, 128)
		for q := range n {
			for k := range n {
				if want := relativeBucket(k-q, 32, 128); ids[q*n+k] != want {
					t.Fatalf("L=%d: bucket of (%d, %d) = %d, want %d", n, q, k, ids[q*n+k], want)
				}
			}
		}
	}
}
