package gemm

import (
	"math"
	"testing"

	"ferry/dtype"
)

// TestExpandMatchesDecoders widens every bit pattern of each storage dtype
// with the assembly loops and with Go, and checks both against package
// dtype's decoders (E4M3 up to its 2⁻⁸ unit; its NaN encodings excepted,
// see expand.go).
func TestExpandMatchesDecoders(t *testing.T) {
	if !hasExpand() {
		t.Skip("CPU lacks AVX2+FMA+F16C (or FERRY_CPU caps it): the vectorised expanding packers do not run here")
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2} {
		n := 1 << (8 * dt.Size())
		src := make([]byte, (n+16)*dt.Size()) // one extra group: a tail for Go
		for i := range n + 16 {
			v := i % n
			if dt.Size() == 2 {
				src[2*i], src[2*i+1] = byte(v), byte(v>>8)
			} else {
				src[i] = byte(v)
			}
		}
		vec, scalar := make([]float32, n+16), make([]float32, n+16)
		expand(vec, src, dt, true)
		expand(scalar, src, dt, false)
		for i := range n + 16 {
			v := i % n
			want := decode(dt, v) / expandUnit(dt)
			nan := math.IsNaN(float64(want)) || (dt == dtype.F8E4M3 && v&0x7f == 0x7f)
			if nan {
				continue
			}
			if math.Float32bits(vec[i]) != math.Float32bits(want) || math.Float32bits(scalar[i]) != math.Float32bits(want) {
				t.Fatalf("%s %#x: vec %g, go %g, want %g", dt, v, vec[i], scalar[i], want)
			}
		}
	}
}

func decode(dt dtype.DType, v int) float32 {
	switch dt {
	case dtype.BF16:
		return dtype.BF16ToF32(uint16(v))
	case dtype.F16:
		return dtype.F16ToF32(uint16(v))
	case dtype.F8E4M3:
		return dtype.F8E4M3ToF32(uint8(v))
	}
	return dtype.F8E5M2ToF32(uint8(v))
}

// TestExpandTail checks lengths that are not whole groups of 16 and an
// odd source address.
func TestExpandTail(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2} {
		buf := make([]byte, 64*dt.Size()+1)
		for i := range buf {
			buf[i] = byte(i*37 + 11)
		}
		src := buf[1:]
		for _, n := range []int{0, 1, 15, 16, 17, 47, 63} {
			got, want := make([]float32, n), make([]float32, n)
			expand(got, src, dt, hasExpand())
			expandGo(want, src, dt)
			for i := range n {
				if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%s n=%d: [%d] = %g, want %g", dt, n, i, got[i], want[i])
				}
			}
		}
	}
}
