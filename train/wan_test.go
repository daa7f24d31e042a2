package train

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/lora"
	"ferry/model/modeltest"
	"ferry/model/wan"
	"ferry/tensor"
)

// goldenDir is the wan_train golden case (from ../shared/golden), one copy
// for every package that tests training.
const goldenDir = "../testdata/wan_train"

// Golden tolerances of the manifest's "wan_train" entry.
const (
	lossRTol    = 1e-5
	gradRelTol  = 1e-4 // of the reference gradient's max |value|
	loraWeightA = 1e-5
)

// goldenSet opens a golden safetensors file for the test.
func goldenSet(t *testing.T, name string) *checkpoint.Set {
	t.Helper()
	s, err := checkpoint.OpenSet(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// goldenBatch is inputs.safetensors as a fixed batch.
func goldenBatch(t *testing.T) *Batch {
	in := goldenSet(t, "inputs.safetensors")
	b := &Batch{}
	b.Latents, b.LatentShape = modeltest.TensorOf(t, in, "latents")
	b.Noise, _ = modeltest.TensorOf(t, in, "noise")
	b.Sigmas, _ = modeltest.TensorOf(t, in, "sigmas")
	b.Context, b.ContextShape = modeltest.TensorOf(t, in, "encoder_hidden_states")
	return b
}

// goldenNet builds a WanNet over the golden model on a fresh CPU device
// and checks, when the test ends, that closing it released everything.
func goldenNet(t *testing.T, opt WanOptions) *WanNet {
	t.Helper()
	cfg, err := wan.ReadConfig(filepath.Join(goldenDir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	dev := cpu.NewDevice(0)
	ops := tensor.NewOps(cpu.New(dev, gemm.Best()))
	net, err := NewWanNet(ops, cfg, goldenSet(t, "model"), opt, NewRNG(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		net.Close()
		if a := dev.Stats().Allocated; a != 0 {
			t.Errorf("device holds %d bytes after Close", a)
		}
	})
	return net
}

// compareGrads checks every gradient within gradRelTol·max|ref| of the
// reference named prefix+name.
func compareGrads(t *testing.T, ref *checkpoint.Set, prefix string, params []*Param, grads [][]float32) {
	t.Helper()
	for i, p := range params {
		want, _ := modeltest.TensorOf(t, ref, prefix+p.Name)
		var absmax float64
		for _, v := range want {
			absmax = math.Max(absmax, math.Abs(float64(v)))
		}
		modeltest.Compare(t, "grad "+p.Name, grads[i], want, gradRelTol*absmax, 0)
	}
}

func scalarOf(t *testing.T, s *checkpoint.Set, name string) float64 {
	v, _ := modeltest.TensorOf(t, s, name)
	return float64(v[0])
}

func checkLoss(t *testing.T, what string, got float32, want float64) {
	t.Helper()
	if d := math.Abs(float64(got) - want); d > lossRTol*math.Abs(want) {
		t.Errorf("%s: loss %.9g, want %.9g (rtol %g)", what, got, want, lossRTol)
	}
}

// TestWanGoldenFull is the golden full fine-tuning step: loss and the
// gradient of every parameter.
func TestWanGoldenFull(t *testing.T) {
	net := goldenNet(t, WanOptions{Full: true})
	tr, err := New(Config{Steps: 1, Adam: DefaultAdam(0)}, net, FixedData{B: goldenBatch(t)}, NewRNG(0))
	if err != nil {
		t.Fatal(err)
	}
	var got [][]float32
	tr.OnFirstGrads = func(_ []*Param, g [][]float32) error { got = copyGrads(g); return nil }
	s, err := tr.Train()
	if err != nil {
		t.Fatal(err)
	}
	ref := goldenSet(t, "outputs_full.safetensors")
	checkLoss(t, "full", s.Loss, scalarOf(t, ref, "loss"))
	if len(net.Params()) != len(net.Config().Params()) {
		t.Fatalf("%d parameters, the transformer has %d", len(net.Params()), len(net.Config().Params()))
	}
	compareGrads(t, ref, "grad.", net.Params(), got)
}

// TestWanGoldenLoRA is the golden LoRA run: two AdamW steps with EMA on
// the same batch; step 1's gradients, both losses, the weights after
// each step and the EMA.
func TestWanGoldenLoRA(t *testing.T) {
	init, err := lora.Read(filepath.Join(goldenDir, "lora_init.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	net := goldenNet(t, WanOptions{LoRA: LoRAOptions{Rank: 4, Alpha: 8, Init: init}})
	adam := AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	tr, err := New(Config{Steps: 2, Adam: adam, EMADecay: 0.9}, net, FixedData{B: goldenBatch(t)}, NewRNG(0))
	if err != nil {
		t.Fatal(err)
	}
	var grads [][]float32
	tr.OnFirstGrads = func(_ []*Param, g [][]float32) error { grads = copyGrads(g); return nil }
	ref := goldenSet(t, "outputs_lora.safetensors")
	params := net.Params()
	if len(params) != 2*len(init) {
		t.Fatalf("%d LoRA parameters for %d adapters", len(params), len(init))
	}
	for k := 1; k <= 2; k++ {
		s, err := tr.Train()
		if err != nil {
			t.Fatal(err)
		}
		step := "step" + string(rune('0'+k)) + "."
		checkLoss(t, step+"loss", s.Loss, scalarOf(t, ref, step+"loss"))
		if k == 1 {
			compareGrads(t, ref, "step1.grad.", params, grads)
		}
		for _, p := range params {
			want, _ := modeltest.TensorOf(t, ref, step+p.Name)
			modeltest.Compare(t, step+p.Name, p.Data, want, loraWeightA, 0)
		}
	}
	for i, p := range params {
		want, _ := modeltest.TensorOf(t, ref, "ema."+p.Name)
		modeltest.Compare(t, "ema."+p.Name, tr.EMA().W[i], want, loraWeightA, 0)
	}
	if !strings.HasSuffix(params[0].Name, ".lora_A.weight") {
		t.Errorf("first parameter %s is not an A matrix", params[0].Name)
	}
}

func copyGrads(g [][]float32) [][]float32 {
	out := make([][]float32, len(g))
	for i := range g {
		out[i] = append([]float32(nil), g[i]...)
	}
	return out
}
