package wan

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
	"ferry/tensor"
)

// rig is an executor on fresh CPU devices with everything resident.
type rig struct {
	dev *cpu.Device
	ex  *residency.Executor
}

// newRig computes with the reference GEMM (gemm.Naive: float64
// accumulation, row results independent of the row count).
func newRig(t *testing.T) *rig { return newRigGEMM(t, nil) }

// newRigGEMM computes with g.
func newRigGEMM(t *testing.T, g gemm.Impl) *rig {
	t.Helper()
	m := modeltest.NewRig(t, g, nil)
	return &rig{dev: m.Dev, ex: m.Ex}
}

// model registers a transformer over src as component "transformer".
func (r *rig) model(t *testing.T, cfg Config, src residency.Source) *Model {
	t.Helper()
	m := New(cfg)
	if err := r.ex.Register(m.Component("transformer", src)); err != nil {
		t.Fatal(err)
	}
	return m
}

// forward uploads the inputs, runs Forward and downloads the result,
// freeing everything it allocated.
func (r *rig) forward(t *testing.T, m *Model, latents []float32, shape []int, ts []float32, ctx []float32, ctxShape []int) []float32 {
	t.Helper()
	ops := r.ex.Ops("transformer")
	x := ops.Upload(latents, shape...)
	c := ops.Upload(ctx, ctxShape...)
	defer tensor.Free(x, c)
	out, err := m.Forward(r.ex, ops, x, ts, c)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]int{shape[0], m.cfg.OutChannels}, shape[2:]...)
	if !tensor.SameShape(out.Shape(), want) {
		t.Fatalf("output %v, want %v", out.Shape(), want)
	}
	got := ops.Download(out)
	out.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// golden is one golden case copied from ../shared/golden into testdata.
type golden struct {
	dir     string
	cfg     Config
	weights *checkpoint.Set
	inputs  *checkpoint.Set
	outputs *checkpoint.Set
}

func loadGolden(t *testing.T, name string) *golden {
	t.Helper()
	dir := filepath.Join("testdata", name)
	gm := modeltest.LoadGolden(t, dir, "diffusion_pytorch_model.safetensors")
	cfg, err := ParseConfig(gm.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &golden{dir: dir, cfg: cfg, weights: gm.Weights, inputs: gm.Inputs, outputs: gm.Outputs}
}

// synthesize makes random weights for every parameter cfg lists, the way
// `ferry synth` uses Params: norm weights near 1, matrices scaled by
// 1/√fan_in so activations stay O(1).
func synthesize(cfg Config, seed uint64) *residencytest.MemSource {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := residencytest.NewMemSource()
	for _, p := range cfg.Params() {
		n := tensor.NumElems(p.Shape)
		std := 1.0
		if len(p.Shape) >= 2 && !strings.HasSuffix(p.Name, "scale_shift_table") {
			std = 1 / math.Sqrt(float64(n/p.Shape[0]))
		}
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
			if len(p.Shape) == 1 && strings.Contains(p.Name, "norm") && strings.HasSuffix(p.Name, ".weight") {
				d[i] = 1 + d[i]/4
			}
		}
		s.Put(p.Name, p.Shape, d)
	}
	return s
}

// tinyConfig is the golden checkpoints' architecture: 2 heads of 20, two
// layers, text width 32.
func tinyConfig() Config {
	c := defaults()
	c.NumAttentionHeads, c.AttentionHeadDim, c.NumLayers = 2, 20, 2
	c.FFNDim, c.FreqDim, c.TextDim = 64, 16, 32
	return c
}
