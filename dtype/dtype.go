// Package dtype names the element types found in checkpoints and on devices,
// and converts the storage types (bf16, fp16, fp8) to float32.
//
// It sits below every other package: checkpoint files, tensors and kernels
// all speak in these types.
package dtype

import (
	"fmt"
	"strings"
)

// DType is an element type. The zero value is Invalid.
type DType uint8

// The element types ferry understands. The names follow safetensors.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	F8E4M3
	F8E5M2
	I64
	I32
	Bool
	F64 // not a checkpoint type here: used for RoPE tables, which diffusers keeps in float64
)

var info = [...]struct {
	name string // safetensors spelling
	size int    // bytes per element
}{
	Invalid: {"INVALID", 0},
	F32:     {"F32", 4},
	F16:     {"F16", 2},
	BF16:    {"BF16", 2},
	F8E4M3:  {"F8_E4M3", 1},
	F8E5M2:  {"F8_E5M2", 1},
	I64:     {"I64", 8},
	I32:     {"I32", 4},
	Bool:    {"BOOL", 1},
	F64:     {"F64", 8},
}

// Size is the number of bytes one element occupies.
func (d DType) Size() int {
	if int(d) >= len(info) {
		return 0
	}
	return info[d].size
}

// String is the safetensors name of the type ("F32", "BF16", "F8_E4M3", ...).
func (d DType) String() string {
	if int(d) >= len(info) {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return info[d].name
}

// IsFloat reports whether d holds floating-point values.
func (d DType) IsFloat() bool {
	switch d {
	case F32, F16, BF16, F8E4M3, F8E5M2, F64:
		return true
	}
	return false
}

// Parse reads a safetensors dtype name. It also accepts the lower-case
// spellings used in configs ("bfloat16", "float16", "float32").
func Parse(s string) (DType, error) {
	for d := F32; int(d) < len(info); d++ {
		if info[d].name == s {
			return d, nil
		}
	}
	switch strings.ToLower(s) {
	case "float32", "fp32", "f32":
		return F32, nil
	case "float16", "fp16", "half", "f16":
		return F16, nil
	case "bfloat16", "bf16":
		return BF16, nil
	case "float64", "fp64", "f64", "double":
		return F64, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, BOOL, F64)", s)
}

// MarshalText writes the safetensors name, so dtypes read well in JSON and YAML.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText accepts what Parse accepts.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
