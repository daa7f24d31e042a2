package wan

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/lora"
	wanmodel "ferry/model/wan"
	"ferry/tensor"
)

// LoRA is one LoRA file applied to the transformer for a request. Its
// adapters run unmerged beside the base weights, which stay as stored and
// stream as planned.
type LoRA struct {
	File string `json:"file"`
	// Scale multiplies each adapter's alpha/rank (1: as trained).
	Scale    float64        `json:"scale"`
	Adapters []lora.Adapter `json:"-"`
}

// loraAlign is where each matrix starts in the adapters' device buffer, in
// floats: 64 bytes, as the executor aligns weights.
const loraAlign = 16

// LoadLoRA reads a LoRA file (any naming package lora reads) and checks it
// against the transformer: every adapter must name one of its Linears, with
// its sizes. Errors are one line naming the file.
func (p *Pipeline) LoadLoRA(path string, scale float64) (LoRA, error) {
	return p.loadLoRA(path, scale, lora.Read)
}

// CheckLoRA is LoadLoRA from the file's header alone: the adapters carry
// shapes and alphas but no A and B values (their NaN check waits for
// LoadLoRA). It is what admission needs: the names, sizes and
// LoRABytes, without reading the matrices a job reads again when it runs.
func (p *Pipeline) CheckLoRA(path string, scale float64) (LoRA, error) {
	return p.loadLoRA(path, scale, lora.ReadShapes)
}

func (p *Pipeline) loadLoRA(path string, scale float64, read func(string) ([]lora.Adapter, error)) (LoRA, error) {
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return LoRA{}, fmt.Errorf("%s: scale %g is not a number", path, scale)
	}
	ads, err := read(path)
	if err != nil {
		return LoRA{}, err
	}
	_, shapes := p.transformer.Config().LinearShapes()
	if err := lora.Check(ads, shapes); err != nil {
		return LoRA{}, fmt.Errorf("%s: %w", path, err)
	}
	return LoRA{File: path, Scale: scale, Adapters: ads}, nil
}

// LoRABytes is what the adapters take on the transformer's device while it
// denoises: one float32 buffer holding every A and B, each 64-byte aligned
// (planner.Request.AdapterBytes).
func LoRABytes(ls []LoRA) int64 {
	var n int64
	for _, l := range ls {
		for _, a := range l.Adapters {
			// From the shapes (A is rank×in, B out×rank, a bias out): adapters
			// read by CheckLoRA carry no values.
			n += int64(alignUp(a.Rank*a.In) + alignUp(a.Out*a.Rank))
			if a.HasBias {
				n += int64(alignUp(a.Out))
			}
		}
	}
	return 4 * n
}

// LoRARanks is the adapters' ranks by module, in the order the
// transformer applies them (planner.Request.LoRA: the planner replays
// each one's intermediates).
func LoRARanks(ls []LoRA) map[string][]int {
	var out map[string][]int
	for _, l := range ls {
		for _, a := range l.Adapters {
			if a.BiasOnly() {
				continue // an added bias keeps no intermediate
			}
			if out == nil {
				out = map[string][]int{}
			}
			out[a.Module] = append(out[a.Module], a.Rank)
		}
	}
	return out
}

func alignUp(n int) int { return (n + loraAlign - 1) / loraAlign * loraAlign }

// scaled is v times s, v itself when s is 1.
func scaled(v []float32, s float32) []float32 {
	if s == 1 {
		return v
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * s
	}
	return out
}

// UploadLoRA copies the adapters of ls to ops' device as float32, in one
// buffer the caller frees after the transformer no longer uses them, and
// returns them as the transformer takes them (wanmodel.Model.SetLoRA), each
// product scaled by its file's Scale times alpha/rank, each bias uploaded
// times its file's Scale. No LoRA gives nil, nil.
func UploadLoRA(ops *tensor.Ops, ls []LoRA) ([]wanmodel.LoRA, *tensor.Tensor, error) {
	if len(ls) == 0 {
		return nil, nil, nil
	}
	for _, l := range ls {
		if len(l.Adapters) == 0 {
			return nil, nil, fmt.Errorf("LoRA %s: no adapters loaded (Pipeline.LoadLoRA reads them)", l.File)
		}
		for _, a := range l.Adapters {
			if len(a.A) != a.Rank*a.In || len(a.B) != a.Out*a.Rank || a.HasBias && len(a.Bias) != a.Out {
				return nil, nil, fmt.Errorf("LoRA %s: adapter %s has no values loaded (Pipeline.LoadLoRA reads them)", l.File, a.Module)
			}
		}
	}
	n := LoRABytes(ls) / 4
	tag := ops.Tag
	ops.Tag = "lora"
	buf := ops.Empty(dtype.F32, int(n))
	ops.Tag = tag
	if err := ops.Err(); err != nil {
		return nil, nil, fmt.Errorf("LoRA adapters (%s): %w", tensor.FormatBytes(4*n), err)
	}
	var out []wanmodel.LoRA
	off := 0
	put := func(data []float32, rows, cols int) *tensor.Tensor {
		v, err := tensor.View(buf.Buffer(), 4*int64(off), dtype.F32, rows, cols)
		off += alignUp(len(data))
		if err != nil {
			ops.Fail(err)
			return nil
		}
		ops.Fail(ops.B.Upload(v, tensor.FromF32(data, len(data)).Raw(), dtype.F32))
		return v
	}
	for _, l := range ls {
		for _, a := range l.Adapters {
			w := wanmodel.LoRA{Module: a.Module}
			if !a.BiasOnly() {
				w.A, w.B = put(a.A, a.Rank, a.In), put(a.B, a.Out, a.Rank)
				w.Scale = float32(l.Scale * float64(a.Alpha) / float64(a.Rank))
			}
			if a.HasBias {
				w.Bias = put(scaled(a.Bias, float32(l.Scale)), 1, a.Out)
			}
			out = append(out, w)
		}
	}
	if err := ops.Err(); err != nil {
		buf.Free()
		return nil, nil, fmt.Errorf("upload LoRA adapters: %w", err)
	}
	return out, buf, nil
}
