package residency

import (
	"fmt"
	"reflect"

	"ferry/tensor"
)

// Fixed is a Runner over tensors the caller already holds on the device,
// by checkpoint name: it moves nothing and plans nothing. Run binds a
// block's `w`-tagged fields from Tensors, runs fn and sets the fields back
// to nil. Full fine-tuning runs the model this way over the trainer's fp32
// master weights (which its optimizer updates in place between steps), and
// tests run models without an executor.
//
// Tables gathered by row (*Rows fields) are not supported: a Fixed has no
// storage to gather them from.
type Fixed struct {
	Tensors map[string]*tensor.Tensor
}

// Run binds b's weights from f.Tensors, runs fn and unbinds them. A
// missing tensor is an error naming it (optional weights stay nil), and
// fn does not run.
func (f Fixed) Run(b *Block, fn func() error) error {
	fs, err := fields(b.Weights, b.Prefix)
	if err != nil {
		return fmt.Errorf("residency: block %s: %w", b.Name, err)
	}
	bound := make([]field, 0, len(fs))
	defer func() {
		for _, x := range bound {
			x.slot.Set(reflect.Zero(x.slot.Type()))
		}
	}()
	for _, x := range fs {
		if x.rows {
			return fmt.Errorf("residency: block %s: %s is a table read by row, which a fixed set cannot bind", b.Name, x.name)
		}
		t, ok := f.Tensors[x.name]
		if !ok || t == nil {
			if x.optional {
				continue
			}
			return fmt.Errorf("residency: block %s: no tensor %q in the fixed set", b.Name, x.name)
		}
		x.slot.Set(reflect.ValueOf(t))
		bound = append(bound, x)
	}
	return fn()
}
