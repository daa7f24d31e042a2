package train

import (
	"fmt"

	"ferry/dtype"
	"ferry/model/wan"
	"ferry/tensor"
)

// bf16 autocast in training (--dtype bf16), what is bf16 and what stays
// float32:
//
//   - bf16: the GEMM weights the device multiplies with (frozen base
//     weights with LoRA, the working copies in full fine-tuning), so that
//     with the backend's compute dtype BF16 every base Linear rounds its
//     input to bf16 and runs the bf16 GEMM (float32 accumulation); and the
//     activations the blocks keep for their backward (wan.TrainOptions),
//     which halves the tape and are widened when the block's backward
//     starts.
//   - float32: the master weights, their gradients (accumulated in
//     float32 whatever the weight's dtype: small updates would vanish in
//     bf16's 8 bits), AdamW's moments and the EMA; the LoRA adapters (tiny,
//     and trained); norms, modulations, the residual stream between blocks
//     (block inputs, which recomputation starts from), the attention and
//     its log-sum-exps, and every elementwise op.

// setupTraining applies the training pass's knobs to the model and, with
// bf16 autocast and weights fixed on the device, narrows the GEMM weights.
func (n *WanNet) setupTraining(o wan.TrainOptions) error {
	n.model.Train = o
	if o.DType != dtype.BF16 || n.res != nil {
		return nil // an executor's MatrixDType says the weights' dtype
	}
	mods, _ := n.model.Config().LinearShapes()
	index := map[*tensor.Tensor]int{}
	for i, d := range n.dev {
		index[d] = i
	}
	for _, mod := range mods {
		name := mod + ".weight"
		w := n.weights[name]
		if w == nil || w.DType() != dtype.F32 {
			continue
		}
		c := n.ops.Cast(w, dtype.BF16)
		if err := n.ops.Err(); err != nil {
			return fmt.Errorf("bf16 copy of %s: %w", name, err)
		}
		if i, ok := index[w]; ok {
			n.dev[i] = c // full fine-tuning: Sync uploads the masters into it, rounded
		}
		n.weights[name] = c
		w.Free()
	}
	return nil
}

// noteTape keeps the stats of the largest tape seen (the report's).
func (n *WanNet) noteTape(t *wan.Tape) {
	s := t.Stats()
	if s.Total().Saved >= n.tapeStats.Total().Saved {
		n.tapeStats = s
	}
}

// TapeStats is what the largest tape of the run held after its forward.
func (n *WanNet) TapeStats() wan.TapeStats { return n.tapeStats }
