package gemm

import (
	"fmt"
	"unsafe"

	"ferry/dtype"
)

// Expanding packers: weights kept in a 16- or 8-bit storage dtype (bf16,
// fp16, fp8 E4M3 or E5M2) are widened to float32 as their panels are
// packed, and the fp32 micro-kernel multiplies the widened panel. A panel
// is widened once per block of A rows that sweeps it (mc rows: 98 or 144),
// so the widening costs a few percent of the products at DiT shapes while
// the weight's bytes in memory stay those of its storage dtype.
//
// Every widening is exact. The E4M3 one produces the value times 2⁻⁸ (see
// expandE4M3AVX2): the GEMM multiplies alpha by expandUnit instead, so the
// products are those of the exact values up to that power of two. E4M3's
// NaN encodings (0x7f, 0xff) widen to ±480·2⁻⁸ rather than NaN: weights
// hold no NaNs, and testing for them would cost the packer a compare.

// expandable reports whether dt is a storage dtype the packers widen.
func expandable(dt dtype.DType) bool {
	switch dt {
	case dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2:
		return true
	}
	return false
}

// expandUnit is the factor the widened values of dt must be multiplied by
// to be the stored values.
func expandUnit(dt dtype.DType) float32 {
	if dt == dtype.F8E4M3 {
		return 256
	}
	return 1
}

// expand widens n = len(dst) elements of type dt from src (raw bytes) into
// dst, as expandUnit describes: with the AVX2 + F16C loops when vec is set
// (for whole groups of 16), in Go otherwise and for the tail.
func expand(dst []float32, src []byte, dt dtype.DType, vec bool) {
	n := len(dst)
	if n == 0 {
		return
	}
	size := dt.Size()
	_ = src[n*size-1]
	done := 0
	if vec {
		done = n &^ 15
		if done > 0 {
			expandVec(&dst[0], unsafe.Pointer(&src[0]), dt, done)
		}
	}
	if done < n {
		expandGo(dst[done:], src[done*size:n*size], dt)
	}
}

// expandVec runs the assembly loop of dt over n (a multiple of 16)
// elements.
func expandVec(dst *float32, src unsafe.Pointer, dt dtype.DType, n int) {
	switch dt {
	case dtype.BF16:
		expandBF16AVX2(dst, (*uint16)(src), n)
	case dtype.F16:
		expandF16AVX2(dst, (*uint16)(src), n)
	case dtype.F8E4M3:
		expandE4M3AVX2(dst, (*uint8)(src), n)
	case dtype.F8E5M2:
		expandE5M2AVX2(dst, (*uint8)(src), n)
	default:
		panic(fmt.Sprintf("gemm: no expanding packer for %s", dt))
	}
}

// expandGo is the portable widening, value for value what the assembly
// computes (E4M3 through the same half-precision bit pattern).
func expandGo(dst []float32, src []byte, dt dtype.DType) {
	switch dt {
	case dtype.BF16:
		for i := range dst {
			dst[i] = dtype.BF16ToF32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
		}
	case dtype.F16:
		for i := range dst {
			dst[i] = dtype.F16ToF32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
		}
	case dtype.F8E4M3:
		for i, v := range src[:len(dst)] {
			dst[i] = dtype.F16ToF32(uint16(v&0x7f)<<7 | uint16(v&0x80)<<8)
		}
	case dtype.F8E5M2:
		for i, v := range src[:len(dst)] {
			dst[i] = dtype.F16ToF32(uint16(v) << 8)
		}
	default:
		panic(fmt.Sprintf("gemm: no expanding packer for %s", dt))
	}
}

// Widen sets dst[i] = scale · src[i] for the len(dst) elements of storage
// dtype dt (bf16, fp16, F8_E4M3 or F8_E5M2) in src's raw bytes, with the
// vectorised expanding packers where the CPU has them: for weights that
// stay dense (shapes the panels do not fit) and are multiplied in fp32.
func Widen(dst []float32, src []byte, dt dtype.DType, scale float32) error {
	if !expandable(dt) {
		return fmt.Errorf("gemm: widen %s: not a 16- or 8-bit float type", dt)
	}
	if len(src) < len(dst)*dt.Size() {
		return fmt.Errorf("gemm: widen %d %s values from %d bytes", len(dst), dt, len(src))
	}
	expand(dst, src, dt, hasExpand())
	if f := scale * expandUnit(dt); f != 1 {
		for i := range dst {
			dst[i] *= f
		}
	}
	return nil
}
