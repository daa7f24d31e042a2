package bench

import (
	"fmt"
	"reflect"
	"strings"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// BF16Runner is a residency.Runner that keeps every block's matrices
// (weights of rank 2 or more named "*.weight") on the device in BF16 and
// everything else (biases, norms, modulation tables) in F32, all loaded
// once and left bound. It stands in for the executor, which today always
// widens floating-point weights to F32 on the device, until the executor
// can keep a plan's compute dtype; with the backend's compute dtype set to
// BF16 the model's Linear layers then run the bf16 GEMM.
type BF16Runner struct {
	ops    *tensor.Ops
	src    *MemorySource
	loaded map[*residency.Block]bool
	held   []*tensor.Tensor
}

// NewBF16Runner loads weights from src through ops (its backend's device).
func NewBF16Runner(ops *tensor.Ops, src *MemorySource) *BF16Runner {
	return &BF16Runner{ops: ops, src: src, loaded: map[*residency.Block]bool{}}
}

// Run binds b's weights (loading them the first time) and runs fn.
func (r *BF16Runner) Run(b *residency.Block, fn func() error) error {
	if !r.loaded[b] {
		if err := r.load(b); err != nil {
			return fmt.Errorf("bench: block %s: %w", b.Name, err)
		}
		r.loaded[b] = true
	}
	return fn()
}

// Close frees every loaded weight.
func (r *BF16Runner) Close() {
	tensor.Free(r.held...)
	r.held = nil
	clear(r.loaded)
}

func (r *BF16Runner) load(b *residency.Block) error {
	v := reflect.ValueOf(b.Weights)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("weights must be a pointer to a struct, got %T", b.Weights)
	}
	return r.walk(v.Elem(), b.Prefix)
}

var tensorPtr = reflect.TypeOf((*tensor.Tensor)(nil))

// walk follows the `w` struct tags as the executor does: *tensor.Tensor
// fields are checkpoint names relative to the prefix, nested structs add
// their tag (if any) and a dot.
func (r *BF16Runner) walk(v reflect.Value, prefix string) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("w")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case sf.Type == tensorPtr:
			w, err := r.tensor(prefix+name, opts == "optional")
			if err != nil {
				return err
			}
			v.Field(i).Set(reflect.ValueOf(w))
		case sf.Type.Kind() == reflect.Struct:
			p := prefix
			if name != "" {
				p += name + "."
			}
			if err := r.walk(v.Field(i), p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("field %s: type %s not supported by the bench runner", sf.Name, sf.Type)
		}
	}
	return nil
}

// tensor loads one weight in its device dtype (nil when optional and
// absent).
func (r *BF16Runner) tensor(name string, optional bool) (*tensor.Tensor, error) {
	info, ok := r.src.Info(name)
	if !ok {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("tensor %q missing", name)
	}
	raw := make([]byte, info.Size)
	if err := r.src.Read(name, 0, raw); err != nil {
		return nil, err
	}
	host, err := tensor.FromBytes(raw, info.DType, info.Shape...)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	devType := dtype.F32
	if len(info.Shape) >= 2 && strings.HasSuffix(name, ".weight") {
		devType = dtype.BF16
	}
	dst := r.ops.Empty(devType, info.Shape...)
	if err := r.ops.Err(); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	if err := r.ops.B.Cast(dst, host); err != nil {
		dst.Free()
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	r.held = append(r.held, dst)
	return dst, nil
}
