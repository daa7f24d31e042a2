package residency

import (
	"fmt"
	"reflect"
	"strings"

	"ferry/tensor"
)

// Model code declares a block's weights as a struct whose *tensor.Tensor
// fields carry the checkpoint name in a `w` tag, relative to the block's
// prefix; nested structs add their own tag as a prefix:
//
//	type linear struct {
//		W *tensor.Tensor `w:"weight"`
//		B *tensor.Tensor `w:"bias,optional"`
//	}
//	type block struct {
//		Q    linear         `w:"attn1.to_q"`
//		Norm *tensor.Tensor `w:"norm2.weight"`
//	}
//
// The executor fills the fields when the block's weights are on the device
// and sets them back to nil when they leave, so a use outside Run fails loudly
// instead of reading stale memory.

// The option "matrix" marks a weight used only as the matrix of a GEMM
// (ops.Linear): when the executor's MatrixDType is BF16 such a weight stays
// bf16 on the device, halving its bytes and the bytes the GEMM reads, and
// the GEMM rounds activations to bf16 at its input; when the backend
// multiplies its storage dtype as stored (Config.KeepStored: bf16, fp16
// and fp8 on x86-64 with AVX2), it keeps that dtype (MatrixDeviceType).
//
// A field of type *residency.Rows (instead of *tensor.Tensor) is a table that
// never moves whole: the executor binds a Rows that gathers the rows asked
// for straight from where the table is stored (the text encoder's 256k-row
// embedding is read by row this way).

// field is one tensor slot found in a weights struct.
type field struct {
	name     string // full checkpoint name
	optional bool
	matrix   bool          // a GEMM weight (tag option "matrix")
	rows     bool          // slot is *Rows
	slot     reflect.Value // settable *tensor.Tensor or *Rows
}

var (
	tensorPtr = reflect.TypeOf((*tensor.Tensor)(nil))
	rowsPtr   = reflect.TypeOf((*Rows)(nil))
)

// fields walks a pointer to a weights struct.
func fields(weights any, prefix string) ([]field, error) {
	v := reflect.ValueOf(weights)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("weights must be a pointer to a struct, got %T", weights)
	}
	var out []field
	err := walk(v.Elem(), prefix, &out)
	return out, err
}

func walk(v reflect.Value, prefix string, out *[]field) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("w")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		optional, matrix, err := tagOptions(opts)
		if err != nil {
			return fmt.Errorf("field %s: %w", sf.Name, err)
		}
		fv := v.Field(i)
		switch {
		case sf.Type == tensorPtr:
			if !fv.CanSet() {
				return fmt.Errorf("field %s (%s%s) is not exported", sf.Name, prefix, name)
			}
			*out = append(*out, field{name: prefix + name, optional: optional, matrix: matrix, slot: fv})
		case sf.Type == rowsPtr:
			if !fv.CanSet() {
				return fmt.Errorf("field %s (%s%s) is not exported", sf.Name, prefix, name)
			}
			*out = append(*out, field{name: prefix + name, optional: optional, rows: true, slot: fv})
		case sf.Type.Kind() == reflect.Struct:
			p := prefix
			if name != "" {
				p += name + "."
			}
			if err := walk(fv, p, out); err != nil {
				return err
			}
		case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
			for j := range fv.Len() {
				if err := walk(fv.Index(j), fmt.Sprintf("%s%s.%d.", prefix, name, j), out); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("field %s has tag w:%q but type %s (want *tensor.Tensor, *residency.Rows or a struct)", sf.Name, tag, sf.Type)
		}
	}
	return nil
}

// tagOptions reads the options after the name in a w tag.
func tagOptions(opts string) (optional, matrix bool, err error) {
	if opts == "" {
		return false, false, nil
	}
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "optional":
			optional = true
		case "matrix":
			matrix = true
		default:
			return false, false, fmt.Errorf("unknown w tag option %q (want optional or matrix)", o)
		}
	}
	return optional, matrix, nil
}

// MatrixWeights lists the checkpoint names of a component's weights tagged
// "matrix" (GEMM weights, which may stay bf16 on the device), from the
// struct tags alone: no source is read. Planners use it to size blocks.
func MatrixWeights(c *Component) (map[string]bool, error) {
	out := map[string]bool{}
	for _, b := range c.Blocks {
		fs, err := fields(b.Weights, b.Prefix)
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", b.Name, err)
		}
		for _, f := range fs {
			if f.matrix {
				out[f.name] = true
			}
		}
	}
	return out, nil
}
