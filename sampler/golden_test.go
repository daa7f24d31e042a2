package sampler

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// stTensor is one tensor of a safetensors file, decoded to float64 (F32) or
// int64 (I64).
type stTensor struct {
	Shape []int
	F     []float32
	I     []int64
}

// readSafetensors is a minimal safetensors reader for the golden files: an
// 8-byte little-endian header length, a JSON header of
// {name: {dtype, shape, data_offsets}}, then the raw data. (The checkpoint
// package has the real reader; tests here stay independent of it.)
func readSafetensors(t *testing.T, path string) map[string]stTensor {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 8 {
		t.Fatalf("%s: too short", path)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n > uint64(len(raw)-8) {
		t.Fatalf("%s: header length %d beyond file", path, n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	data := raw[8+n:]
	out := map[string]stTensor{}
	for name, msg := range header {
		if name == "__metadata__" {
			continue
		}
		var h struct {
			Dtype   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &h); err != nil {
			t.Fatalf("%s: %s: %v", path, name, err)
		}
		if h.Offsets[0] < 0 || h.Offsets[1] > len(data) || h.Offsets[0] > h.Offsets[1] {
			t.Fatalf("%s: %s: bad offsets %v", path, name, h.Offsets)
		}
		b := data[h.Offsets[0]:h.Offsets[1]]
		ten := stTensor{Shape: h.Shape}
		switch h.Dtype {
		case "F32":
			for i := 0; i+4 <= len(b); i += 4 {
				ten.F = append(ten.F, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			}
		case "I64":
			for i := 0; i+8 <= len(b); i += 8 {
				ten.I = append(ten.I, int64(binary.LittleEndian.Uint64(b[i:])))
			}
		default:
			t.Fatalf("%s: %s: dtype %s not handled", path, name, h.Dtype)
		}
		out[name] = ten
	}
	return out
}

// goldenCase is the part of a manifest.json scheduler case the tests use.
type goldenCase struct {
	Class         string          `json:"class"`
	Config        json.RawMessage `json:"config"`
	Steps         int             `json:"num_inference_steps"`
	ImageSeqLen   int             `json:"image_seq_len"`
	Mu            *float64        `json:"mu"`
	Tensors       string          `json:"tensors"`
	TolTimesteps  float64
	TolSigmas     float64
	TolPrevSample float64
}

// loadCase reads one case of testdata/manifest.json (a copy of the scheduler
// cases of the shared golden manifest) and its tolerances.
func loadCase(t *testing.T, name string) goldenCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	var c goldenCase
	if err := json.Unmarshal(cases[name], &c); err != nil {
		t.Fatalf("case %s: %v", name, err)
	}
	var tol struct {
		Tolerance map[string]json.RawMessage `json:"tolerance"`
	}
	if err := json.Unmarshal(cases[name], &tol); err != nil {
		t.Fatal(err)
	}
	atol := func(key string) float64 {
		var v struct {
			Atol float64 `json:"atol"`
		}
		if json.Unmarshal(tol.Tolerance[key], &v) != nil {
			return 0 // "exact (int64)" is a string: exact
		}
		return v.Atol
	}
	c.TolTimesteps, c.TolSigmas, c.TolPrevSample = atol("timesteps"), atol("sigmas"), atol("prev_samples")
	if c.TolSigmas == 0 || c.TolPrevSample == 0 {
		t.Fatalf("case %s: missing tolerances", name)
	}
	return c
}

// schedulerConfig turns a manifest config into a scheduler_config.json by
// adding the class name, so the test goes through FromConfig.
func schedulerConfig(t *testing.T, c goldenCase) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(c.Config, &m); err != nil {
		t.Fatal(err)
	}
	class := c.Class
	if i := len("diffusers."); len(class) > i && class[:i] == "diffusers." {
		class = class[i:]
	}
	m["_class_name"] = class
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func maxAbsDiff(a []float32, b []float32) (float64, int) {
	worst, at := 0.0, -1
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.Inf(1), i
			}
		}
	}
	return worst, at
}

func TestGoldenSchedulers(t *testing.T) {
	for _, name := range []string{"wan_unipc_shift3", "wan_unipc_shift5", "flowmatch_euler_shift3", "flowmatch_euler_flux_dynamic"} {
		t.Run(name, func(t *testing.T) {
			c := loadCase(t, name)
			ref := readSafetensors(t, filepath.Join("testdata", filepath.Base(c.Tensors)))
			s, err := FromConfig(schedulerConfig(t, c))
			if err != nil {
				t.Fatal(err)
			}
			setGoldenTimesteps(t, s, c)
			checkTimesteps(t, s, ref["timesteps"], c.TolTimesteps)
			checkSigmasClose(t, s.Sigmas(), ref["sigmas"].F, c.TolSigmas)
			checkSteps(t, s, ref, c.TolPrevSample)
		})
	}
}

// setGoldenTimesteps makes the case's set_timesteps call: plain for a static
// shift, FluxPipeline's sigmas and mu for a dynamic one.
func setGoldenTimesteps(t *testing.T, s Scheduler, c goldenCase) {
	t.Helper()
	fm, ok := s.(*FlowMatchEuler)
	if !ok || !fm.Config().UseDynamicShifting {
		if err := s.SetTimesteps(c.Steps); err != nil {
			t.Fatal(err)
		}
		return
	}
	mu := fm.Config().Mu(c.ImageSeqLen)
	if c.Mu == nil || math.Abs(mu-*c.Mu) > 1e-9 {
		t.Fatalf("mu = %v, manifest says %v", mu, c.Mu)
	}
	// As FluxPipeline: sigmas = np.linspace(1.0, 1 / steps, steps).
	sigmas := linspace(1, 1/float64(c.Steps), c.Steps)
	if err := s.SetTimestepsWith(0, ScheduleOptions{Sigmas: sigmas, Mu: &mu}); err != nil {
		t.Fatal(err)
	}
}

func checkTimesteps(t *testing.T, s Scheduler, want stTensor, atol float64) {
	t.Helper()
	got := s.Timesteps()
	if want.I != nil {
		ints, ok := s.IntTimesteps()
		if !ok {
			t.Fatal("reference has int64 timesteps, scheduler has none")
		}
		if fmt.Sprint(ints) != fmt.Sprint(want.I) {
			t.Fatalf("timesteps = %v, want %v (exact)", ints, want.I)
		}
		for i, v := range want.I {
			if got[i] != float32(v) {
				t.Errorf("float timestep %d = %v, want %v", i, got[i], float32(v))
			}
		}
		return
	}
	if len(got) != len(want.F) {
		t.Fatalf("%d timesteps, want %d", len(got), len(want.F))
	}
	if d, i := maxAbsDiff(got, want.F); d > atol {
		t.Fatalf("timestep %d = %v, want %v (|diff| %g > %g)", i, got[i], want.F[i], d, atol)
	}
}

func checkSigmasClose(t *testing.T, got, want []float32, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d sigmas, want %d", len(got), len(want))
	}
	if d, i := maxAbsDiff(got, want); d > atol {
		t.Fatalf("sigma %d = %v, want %v (|diff| %g > %g)", i, got[i], want[i], d, atol)
	}
}

// checkSteps runs the recorded model outputs through Step and compares every
// intermediate sample with prev_samples.
func checkSteps(t *testing.T, s Scheduler, ref map[string]stTensor, atol float64) {
	t.Helper()
	x := append([]float32(nil), ref["sample"].F...)
	outs, prev := ref["model_outputs"].F, ref["prev_samples"].F
	n := len(x)
	steps := len(s.Timesteps())
	if len(outs) != steps*n || len(prev) != steps*n {
		t.Fatalf("golden sizes: %d outputs, %d prev for %d steps of %d", len(outs), len(prev), steps, n)
	}
	for i := 0; i < steps; i++ {
		if err := s.Step(outs[i*n:(i+1)*n], x); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := prev[i*n : (i+1)*n]
		d, j := maxAbsDiff(x, want)
		t.Logf("step %d: max |diff| %.3g", i, d)
		if d > atol {
			t.Fatalf("step %d: element %d = %v, want %v (|diff| %g > %g)", i, j, x[j], want[j], d, atol)
		}
	}
	if err := s.Step(outs[:n], x); err != ErrDone {
		t.Fatalf("step past the end: err = %v, want ErrDone", err)
	}
}

// TestWanPipelineTimesteps checks the schedule WanPipeline used in the
// pipeline golden run (3 steps, the saved scheduler_config.json).
func TestWanPipelineTimesteps(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "wan_pipeline_scheduler_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := FromConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := readSafetensors(t, filepath.Join("testdata", "wan_pipeline_timesteps.safetensors"))["timesteps"]
	if err := s.SetTimesteps(len(want.I)); err != nil {
		t.Fatal(err)
	}
	checkTimesteps(t, s, want, 0)
}
