// Package modeltest holds what the model packages' tests share: comparing
// against golden vectors within a tolerance, reading golden tensors,
// random inputs, and checking a model's declared parameters against a
// reference checkpoint. Only tests import it.
package modeltest

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/residency"
)

// Compare reports the largest |got-want| and fails where it exceeds
// atol + rtol·|want| (naming the first few values and counting the rest).
func Compare(t testing.TB, what string, got, want []float32, atol, rtol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, bad := 0.0, 0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) || d > atol+rtol*math.Abs(float64(want[i])) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			}
			bad++
		}
		if d > worst || math.IsNaN(d) {
			worst = d
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values outside atol %g rtol %g (max abs error %g)", what, bad, len(got), atol, rtol, worst)
	}
	return worst
}

// Randn returns n standard normal values, the same for the same seed.
func Randn(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 2))
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(rng.NormFloat64())
	}
	return d
}

// TensorOf reads a float tensor of a golden file as float32 with its shape.
func TensorOf(t testing.TB, s *checkpoint.Set, name string) ([]float32, []int) {
	t.Helper()
	info, ok := s.Lookup(name)
	if !ok {
		t.Fatalf("%s: no tensor %q", s.Path(), name)
	}
	d, err := s.ReadF32(info)
	if err != nil {
		t.Fatal(err)
	}
	return d, info.Shape
}

// ParamsMatchCheckpoint checks that params lists every tensor of the
// reference checkpoint once, with its shape, and nothing else.
func ParamsMatchCheckpoint(t testing.TB, weights *checkpoint.Set, params []residency.ParamSpec) {
	t.Helper()
	want := map[string][]int{}
	for _, n := range weights.Names() {
		info, _ := weights.Lookup(n)
		want[n] = info.Shape
	}
	seen := map[string]bool{}
	for _, p := range params {
		if seen[p.Name] {
			t.Errorf("%s listed twice", p.Name)
		}
		seen[p.Name] = true
		shape, ok := want[p.Name]
		switch {
		case !ok:
			t.Errorf("Params lists %s %v, the checkpoint has no such tensor", p.Name, p.Shape)
		case !slices.Equal(shape, p.Shape):
			t.Errorf("%s: Params shape %v, checkpoint %v", p.Name, p.Shape, shape)
		}
	}
	for n := range want {
		if !seen[n] {
			t.Errorf("checkpoint tensor %s is missing from Params", n)
		}
	}
}

// Golden is one golden case copied from ../shared/golden into testdata:
// its config.json and its weights, inputs and outputs, open until the test
// ends.
type Golden struct {
	Config                   []byte
	Weights, Inputs, Outputs *checkpoint.Set
}

// LoadGolden opens the golden case in dir, whose weights are weightsFile.
func LoadGolden(t testing.TB, dir, weightsFile string) *Golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := &Golden{Config: raw}
	for _, f := range []struct {
		set  **checkpoint.Set
		file string
	}{{&g.Weights, weightsFile}, {&g.Inputs, "inputs.safetensors"}, {&g.Outputs, "outputs.safetensors"}} {
		s, err := checkpoint.OpenSet(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		*f.set = s
		t.Cleanup(func() { s.Close() })
	}
	return g
}

// Rig is an executor on fresh, unbudgeted CPU devices: what a model test
// registers its component with.
type Rig struct {
	Dev *cpu.Device
	Ex  *residency.Executor
}

// NewRig computes with g (nil: gemm.Naive, the reference) under plan (nil:
// everything resident). When the test ends it closes the executor and fails
// if the device still holds memory.
func NewRig(t testing.TB, g gemm.Impl, plan *residency.Plan) *Rig {
	t.Helper()
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g), Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ex.Close()
		if a := dev.Stats().Allocated; a != 0 {
			t.Errorf("device still holds %d bytes after Close", a)
		}
	})
	return &Rig{Dev: dev, Ex: ex}
}
