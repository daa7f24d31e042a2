package wanvae

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
	"ferry/tensor"
)

// The golden case's tolerance (manifest.json: atol 1e-4, rtol 1e-4).
const atol, rtol = 1e-4, 1e-4

// rig is an executor on fresh CPU devices.
type rig struct {
	dev *cpu.Device
	ex  *residency.Executor
}

// newRig computes with g (nil: gemm.Naive, the reference) under plan (nil:
// everything resident).
func newRig(t testing.TB, g gemm.Impl, plan *residency.Plan) *rig {
	t.Helper()
	m := modeltest.NewRig(t, g, plan)
	return &rig{dev: m.Dev, ex: m.Ex}
}

// model registers the whole VAE over src as component "vae".
func (r *rig) model(t testing.TB, cfg Config, src residency.Source) *Model {
	t.Helper()
	m := New(cfg)
	if err := r.ex.Register(m.Component("vae", src)); err != nil {
		t.Fatal(err)
	}
	return m
}

// decode uploads z, runs Decode and downloads the result.
func (r *rig) decode(t testing.TB, m *Model, z []float32, shape []int) ([]float32, []int) {
	t.Helper()
	ops := r.ex.Ops("vae")
	x := ops.Upload(z, shape...)
	defer x.Free()
	out, err := m.Decode(r.ex, ops, x)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	got := ops.Download(out)
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	return got, append([]int(nil), out.Shape()...)
}

// encode uploads video, runs Encode and downloads mean, log-variance and
// the standard deviation.
func (r *rig) encode(t testing.TB, m *Model, video []float32, shape []int) (mean, logvar, std []float32, outShape []int) {
	t.Helper()
	ops := r.ex.Ops("vae")
	x := ops.Upload(video, shape...)
	defer x.Free()
	mt, lt, err := m.Encode(r.ex, ops, x)
	if err != nil {
		t.Fatal(err)
	}
	st := Std(ops, lt)
	defer tensor.Free(mt, lt, st)
	mean, logvar, std = ops.Download(mt), ops.Download(lt), ops.Download(st)
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	if !tensor.SameShape(mt.Shape(), lt.Shape()) {
		t.Fatalf("mean %v, logvar %v", mt.Shape(), lt.Shape())
	}
	return mean, logvar, std, append([]int(nil), mt.Shape()...)
}

// golden is the wan_vae golden case copied from ../shared/golden.
type golden struct {
	cfg     Config
	weights *checkpoint.Set
	inputs  *checkpoint.Set
	outputs *checkpoint.Set
}

func loadGolden(t testing.TB) *golden {
	t.Helper()
	dir := filepath.Join("testdata", "wan_vae")
	gm := modeltest.LoadGolden(t, dir, "diffusion_pytorch_model.safetensors")
	cfg, err := ParseConfig(gm.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &golden{cfg: cfg, weights: gm.Weights, inputs: gm.Inputs, outputs: gm.Outputs}
}

func absMax(d []float32) float64 {
	m := 0.0
	for _, v := range d {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// synthesize makes random weights for every parameter cfg lists, the way
// `ferry synth` uses Params: norm gammas near 1, conv weights scaled by
// 1/√fan_in so activations stay O(1).
func synthesize(cfg Config, seed uint64) *residencytest.MemSource {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := residencytest.NewMemSource()
	for _, p := range cfg.Params() {
		n := tensor.NumElems(p.Shape)
		std := 0.1
		if len(p.Shape) >= 2 {
			std = 1 / math.Sqrt(float64(n/p.Shape[0]))
		}
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
			if strings.HasSuffix(p.Name, ".gamma") {
				d[i] = 1 + d[i]
			}
		}
		s.Put(p.Name, p.Shape, d)
	}
	return s
}

// shapeOnly is a checkpoint that describes every tensor Params lists but
// holds no data: enough to register a component (which resolves names and
// sizes) without reading weights.
type shapeOnly map[string][]int

func shapeSource(cfg Config) shapeOnly {
	s := shapeOnly{}
	for _, p := range cfg.Params() {
		s[p.Name] = p.Shape
	}
	return s
}

func (s shapeOnly) Info(name string) (residency.TensorInfo, bool) {
	shape, ok := s[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.F32, Shape: shape, Size: int64(4 * tensor.NumElems(shape))}, true
}

func (s shapeOnly) Read(name string, off int64, dst []byte) error {
	return fmt.Errorf("%s: a shape-only checkpoint holds no data", name)
}

func (s shapeOnly) Drop(string) {}
