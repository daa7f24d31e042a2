package umt5

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
	"ferry/tensor"
)

// synthesize makes random weights for every parameter cfg lists: the way
// `ferry synth` uses Params. Norm weights stay near 1, matrices are scaled
// like the reference's initialisation so activations stay O(1).
func synthesize(cfg Config, seed uint64) *residencytest.MemSource {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := residencytest.NewMemSource()
	for _, p := range cfg.Params() {
		n := tensor.NumElems(p.Shape)
		std := 1.0
		if len(p.Shape) == 2 && !p.Rows && !strings.Contains(p.Name, "relative_attention_bias") {
			std = 1 / math.Sqrt(float64(p.Shape[1]))
		}
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
			if len(p.Shape) == 1 {
				d[i] = 1 + d[i]/4
			}
		}
		s.Put(p.Name, p.Shape, d)
	}
	return s
}

// rig is an executor on fresh CPU devices.
type rig struct {
	dev *cpu.Device
	ex  *residency.Executor
}

func newRig(t *testing.T, plan *residency.Plan) *rig {
	t.Helper()
	return newRigWith(t, plan, gemm.Naive{})
}

// newRigWith computes with g.
func newRigWith(t *testing.T, plan *residency.Plan, g gemm.Impl) *rig {
	t.Helper()
	m := modeltest.NewRig(t, g, plan)
	return &rig{dev: m.Dev, ex: m.Ex}
}

// encoder registers a model over src as component "text_encoder".
func (r *rig) encoder(t *testing.T, cfg Config, src residency.Source) *Model {
	t.Helper()
	m := New(cfg)
	if err := r.ex.Register(m.Component("text_encoder", src)); err != nil {
		t.Fatal(err)
	}
	return m
}

// encode runs Encode and downloads the result, checking that the device
// holds no more than before once the result is freed.
func (r *rig) encode(t *testing.T, m *Model, ids, mask []int32, batch, seqLen int) []float32 {
	t.Helper()
	ops := r.ex.Ops("text_encoder")
	out, err := m.Encode(r.ex, ops, ids, mask, batch, seqLen)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{batch, seqLen, m.cfg.DModel}; !tensor.SameShape(out.Shape(), want) {
		t.Fatalf("output %v, want %v", out.Shape(), want)
	}
	got := ops.Download(out)
	out.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}
