package residency

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// Rows is a 2-D table, typically a token embedding, that stays where it is
// stored; Gather reads just the rows a request needs. This is how a 256k-row
// vocabulary is used without moving gigabytes for a few hundred tokens.
type Rows struct {
	name   string
	info   TensorInfo
	src    Source
	onRead func(n int64)
}

// Shape is the table's [rows, width].
func (r *Rows) Shape() []int { return r.info.Shape }

// Gather returns float32 [len(ids), width] holding rows ids, allocated by ops.
func (r *Rows) Gather(ops *tensor.Ops, ids []int32) *tensor.Tensor {
	if ops.Err() != nil {
		return ops.Empty(dtype.F32, len(ids), r.info.Shape[1])
	}
	rows, width := r.info.Shape[0], r.info.Shape[1]
	rowBytes := int64(width * r.info.DType.Size())
	raw := make([]byte, int64(len(ids))*rowBytes)
	for i, id := range ids {
		if id < 0 || int(id) >= rows {
			ops.Fail(fmt.Errorf("gather %s: id %d outside [0, %d)", r.name, id, rows))
			return ops.Empty(dtype.F32, len(ids), width)
		}
		if err := r.src.Read(r.name, int64(id)*rowBytes, raw[int64(i)*rowBytes:int64(i+1)*rowBytes]); err != nil {
			ops.Fail(fmt.Errorf("gather %s: %w", r.name, err))
			return ops.Empty(dtype.F32, len(ids), width)
		}
	}
	if r.onRead != nil {
		r.onRead(int64(len(raw)))
	}
	out := ops.Empty(dtype.F32, len(ids), width)
	if ops.Err() == nil {
		if err := ops.B.Upload(out, raw, r.info.DType); err != nil {
			ops.Fail(fmt.Errorf("gather %s: %w", r.name, err))
		}
	}
	return out
}
