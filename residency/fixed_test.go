package residency

import (
	"errors"
	"strings"
	"testing"

	"ferry/tensor"
)

// fixedBlock has a required weight, an optional one and a nested struct.
type fixedBlock struct {
	W    *tensor.Tensor `w:"w,matrix"`
	Bias *tensor.Tensor `w:"b,optional"`
	Sub  struct {
		Norm *tensor.Tensor `w:"weight"`
	} `w:"norm"`
}

// rowsBlock holds a table read by row, which Fixed cannot bind.
type rowsBlock struct {
	Table *Rows `w:"embed"`
}

func TestFixedRun(t *testing.T) {
	w, bias, norm := tensor.FromF32([]float32{1, 2}, 2), tensor.FromF32([]float32{3}, 1), tensor.FromF32([]float32{4}, 1)
	all := map[string]*tensor.Tensor{"blocks.1.w": w, "blocks.1.b": bias, "blocks.1.norm.weight": norm}
	without := func(name string) map[string]*tensor.Tensor {
		m := map[string]*tensor.Tensor{}
		for k, v := range all {
			if k != name {
				m[k] = v
			}
		}
		return m
	}
	fnErr := errors.New("fn failed")
	cases := []struct {
		name     string
		tensors  map[string]*tensor.Tensor
		weights  any
		fnErr    error
		wantErr  string // substring; "" for success
		wantBias *tensor.Tensor
		ran      bool
	}{
		{name: "all bound", tensors: all, wantBias: bias, ran: true},
		{name: "optional missing", tensors: without("blocks.1.b"), ran: true},
		{name: "required missing", tensors: without("blocks.1.norm.weight"), wantErr: `"blocks.1.norm.weight"`},
		{name: "nil tensor", tensors: map[string]*tensor.Tensor{"blocks.1.w": nil, "blocks.1.norm.weight": norm}, wantErr: `"blocks.1.w"`},
		{name: "fn error passed on", tensors: all, fnErr: fnErr, wantErr: "fn failed", wantBias: bias, ran: true},
		{name: "rows field", tensors: all, weights: &rowsBlock{}, wantErr: "read by row"},
		{name: "not a pointer", tensors: all, weights: fixedBlock{}, wantErr: "pointer to a struct"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fb := &fixedBlock{}
			weights := tc.weights
			if weights == nil {
				weights = fb
			}
			b := &Block{Name: "m.blocks.1", Prefix: "blocks.1.", Weights: weights}
			ran := false
			err := Fixed{Tensors: tc.tensors}.Run(b, func() error {
				ran = true
				if fb.W != w || fb.Sub.Norm != norm || fb.Bias != tc.wantBias {
					t.Errorf("bound W %p norm %p bias %p, want %p %p %p", fb.W, fb.Sub.Norm, fb.Bias, w, norm, tc.wantBias)
				}
				return tc.fnErr
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Run error %v, want one containing %s", err, tc.wantErr)
			}
			if ran != tc.ran {
				t.Errorf("fn ran: %v, want %v", ran, tc.ran)
			}
			if fb.W != nil || fb.Bias != nil || fb.Sub.Norm != nil {
				t.Error("fields still bound after Run")
			}
		})
	}
}
