package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// BF16ToF32 returns the float32 whose upper half is the bfloat16 bits h.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds f to the nearest bfloat16, ties to even, as PyTorch does.
// NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 converts IEEE half precision bits to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal half: value = man * 2^-24, exact in float32.
	v := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// F32ToF16 rounds f to the nearest half-precision value, ties to even.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the right answer
	}
	return sign | uint16(h)
}

// F8E4M3ToF32 decodes float8 e4m3fn (no infinities; 0x7f/0xff are NaN).
func F8E4M3ToF32(v uint8) float32 { return f8e4m3Table[v] }

// F8E5M2ToF32 decodes float8 e5m2 (the upper byte of an IEEE half).
func F8E5M2ToF32(v uint8) float32 { return F16ToF32(uint16(v) << 8) }

var f8e4m3Table = func() (t [256]float32) {
	for i := range t {
		sign := float32(1)
		if i&0x80 != 0 {
			sign = -1
		}
		exp := (i >> 3) & 0xf
		man := i & 7
		switch {
		case exp == 0xf && man == 7:
			t[i] = float32(math.NaN())
		case exp == 0:
			t[i] = sign * float32(man) / 8 * float32(math.Ldexp(1, -6))
		default:
			t[i] = sign * (1 + float32(man)/8) * float32(math.Ldexp(1, exp-7))
		}
	}
	return t
}()

// ToF32 converts n elements of type src stored little-endian in b into dst.
// It is the host->device upcast on the CPU backend. Integer types are
// converted by value. len(dst) must equal len(b)/src.Size().
func ToF32(dst []float32, b []byte, src DType) error {
	n := len(dst)
	if src.Size() == 0 || len(b) != n*src.Size() {
		return fmt.Errorf("convert %s to F32: %d bytes for %d elements", src, len(b), n)
	}
	if n == 0 {
		return nil
	}
	switch src {
	case F32:
		copy(dst, unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n))
	case BF16:
		bf16ToF32(dst, unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n))
	case F16:
		s := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
		for i, h := range s {
			dst[i] = F16ToF32(h)
		}
	case F8E4M3:
		for i, v := range b {
			dst[i] = f8e4m3Table[v]
		}
	case F8E5M2:
		for i, v := range b {
			dst[i] = F16ToF32(uint16(v) << 8)
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case I64:
		for i := range dst {
			dst[i] = float32(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case Bool:
		for i, v := range b {
			if v != 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	default:
		return fmt.Errorf("convert %s to F32: unsupported", src)
	}
	return nil
}

// bf16ToF32 widens bfloat16 to float32: a shift into the upper half.
// Written over 8-wide chunks so the compiler keeps it branch-free.
func bf16ToF32(dst []float32, src []uint16) {
	d := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), len(dst))
	i := 0
	for ; i+8 <= len(src); i += 8 {
		s := src[i : i+8 : i+8]
		o := d[i : i+8 : i+8]
		o[0] = uint32(s[0]) << 16
		o[1] = uint32(s[1]) << 16
		o[2] = uint32(s[2]) << 16
		o[3] = uint32(s[3]) << 16
		o[4] = uint32(s[4]) << 16
		o[5] = uint32(s[5]) << 16
		o[6] = uint32(s[6]) << 16
		o[7] = uint32(s[7]) << 16
	}
	for ; i < len(src); i++ {
		d[i] = uint32(src[i]) << 16
	}
}
