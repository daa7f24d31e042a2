package residency

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

type matrixBlock struct {
	W   *tensor.Tensor `w:"w,matrix"`
	Odd *tensor.Tensor `w:"odd,matrix"` // 40 rows: not whole panels, stays dense
}

// TestMatrixWeightsPackedOnLoad: on the CPU backend with the Go GEMMs, a
// GEMM weight whose packing takes its own bytes is packed as it is copied
// (bf16 for compute dtype bf16, else fp32), from every tier (read by
// chunks of whole row groups from disk, whole from the host copy), and
// Linear over it gives exactly the product over the dense weight; a shape
// that does not pack stays dense.
func TestMatrixWeightsPackedOnLoad(t *testing.T) {
	const n, k, m = 96, 80, 5
	for _, tc := range []struct {
		compute dtype.DType
		plan    ComponentPlan
		chunk   int64
	}{
		{dtype.BF16, ComponentPlan{Placement: Resident, Tier: TierHost}, 0},
		{dtype.BF16, ComponentPlan{Placement: Stream, Tier: TierDisk, Prefetch: 1}, 2 * 32 * k}, // one row group per chunk
		{dtype.BF16, ComponentPlan{Placement: Stream, Tier: TierHost, Prefetch: 1}, 0},
		{dtype.F32, ComponentPlan{Placement: Resident, Tier: TierHost}, 0},
		{dtype.F32, ComponentPlan{Placement: Stream, Tier: TierDisk, Prefetch: 1}, 2 * 32 * k},
	} {
		t.Run(fmt.Sprintf("%s-%s-%s", tc.compute, tc.plan.Placement, tc.plan.Tier), func(t *testing.T) {
			src := &memSource{tensors: map[string]memTensor{}}
			src.add("w", -3, n, k)
			src.add("odd", 2, 40, k)
			for _, name := range []string{"w", "odd"} { // spread the values: exact bf16 sums are not the point
				d := src.tensors[name].data
				for i := 0; i < len(d); i += 2 {
					v := dtype.BF16ToF32(uint16(d[i]) | uint16(d[i+1])<<8)
					b := dtype.F32ToBF16(float32(math.Sin(float64(v))))
					d[i], d[i+1] = byte(b), byte(b>>8)
				}
			}
			dev := cpu.NewDevice(0)
			be := cpu.New(dev, gemm.DefaultGo())
			if err := be.SetComputeDType(tc.compute); err != nil {
				t.Fatal(err)
			}
			ex, err := New(Config{Backend: be, HostBackend: be, MatrixDType: tc.compute, ChunkBytes: tc.chunk,
				Plan: &Plan{Components: map[string]ComponentPlan{"c": tc.plan}}})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			w := &matrixBlock{}
			c := &Component{Name: "c", Source: src, Blocks: []*Block{{Name: "c.0", Weights: w}}}
			if err := ex.Register(c); err != nil {
				t.Fatal(err)
			}
			ops := tensor.NewOps(be)
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(math.Cos(float64(i)))
			}
			xt := ops.Upload(x, m, k)
			defer xt.Free()
			for range 2 { // the second run reuses (resident) or reloads (stream) the block
				err = ex.Run(c.Blocks[0], func() error {
					if w.W.Layout() == "" {
						return fmt.Errorf("weight %v was not packed", w.W)
					}
					if w.Odd.Layout() != "" {
						return fmt.Errorf("weight %v was packed though its packing would not take its bytes", w.Odd)
					}
					got := ops.Linear(xt, w.W, nil)
					defer got.Free()
					dense, err := tensor.FromBytes(src.tensors["w"].data, dtype.BF16, n, k)
					if err != nil {
						return err
					}
					want := make([]float32, m*n)
					if tc.compute == dtype.BF16 {
						if err := gemm.DefaultBF16().GemmBF16(m, n, k, x, k, dense.U16(), k, 0, want, n); err != nil {
							return err
						}
					} else {
						wf := make([]float32, n*k)
						for i, v := range dense.U16() {
							wf[i] = dtype.BF16ToF32(v)
						}
						gemm.DefaultGo().Sgemm(false, true, m, n, k, 1, x, k, wf, k, 0, want, n)
					}
					if err := ops.Err(); err != nil {
						return err
					}
					for i, v := range got.F32() {
						if math.Float32bits(v) != math.Float32bits(want[i]) {
							return fmt.Errorf("y[%d] = %g over the packed weight, %g over the dense one", i, v, want[i])
						}
					}
					if _, err := w.W.Reshape(k, n); err == nil {
						return fmt.Errorf("a packed weight was reshaped")
					}
					dst := ops.Empty(w.W.DType(), n, k)
					defer dst.Free()
					if err := be.Cast(dst, w.W); err == nil || !strings.Contains(err.Error(), "only Linear reads it") {
						return fmt.Errorf("cast of a packed weight: %v", err)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
