package clipvision

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
	"ferry/tensor"
)

const component = "image_encoder"

// synthesize makes random weights for every parameter cfg lists, the way
// `ferry synth` uses Params: norm weights near 1, biases small, matrices
// scaled by 1/sqrt(fan-in) so activations stay O(1).
func synthesize(cfg Config, seed uint64) *residencytest.MemSource {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := residencytest.NewMemSource()
	for _, p := range cfg.Params() {
		d := make([]float32, tensor.NumElems(p.Shape))
		fanIn := tensor.NumElems(p.Shape[1:])
		for i := range d {
			v := rng.NormFloat64()
			switch {
			case len(p.Shape) > 1 && !strings.Contains(p.Name, "position"):
				v /= math.Sqrt(float64(fanIn))
			case strings.HasSuffix(p.Name, "norm1.weight") || strings.HasSuffix(p.Name, "norm2.weight") || strings.HasSuffix(p.Name, "layrnorm.weight"):
				v = 1 + v/4
			case strings.HasSuffix(p.Name, ".bias"):
				v /= 10
			}
			d[i] = float32(v)
		}
		s.Put(p.Name, p.Shape, d)
	}
	return s
}

// rig is an executor on fresh CPU devices.
type rig struct{ *modeltest.Rig }

func newRig(t testing.TB, plan *residency.Plan, g gemm.Impl) rig {
	t.Helper()
	return rig{modeltest.NewRig(t, g, plan)}
}

// tower registers a model over src.
func (r rig) tower(t testing.TB, cfg Config, src residency.Source) *Model {
	t.Helper()
	m := New(cfg)
	if err := r.Ex.Register(m.Component(component, src)); err != nil {
		t.Fatal(err)
	}
	return m
}

// encode runs Encode, checks the shape and downloads the result.
func (r rig) encode(t testing.TB, m *Model, pixels []float32, batch int) []float32 {
	t.Helper()
	ops := r.Ex.Ops(component)
	out, err := m.Encode(r.Ex, ops, pixels, batch)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	if want := []int{batch, c.Tokens(), c.HiddenSize}; !tensor.SameShape(out.Shape(), want) {
		t.Fatalf("output %v, want %v", out.Shape(), want)
	}
	got := ops.Download(out)
	out.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func tinyConfig(t testing.TB, raw string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
