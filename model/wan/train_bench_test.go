package wan

import (
	"math"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// BenchmarkTrainBlock1_3B times one training step of one Wan2.1-1.3B
// transformer block (dim 1536, 12 heads, ffn 8960) at 1280 tokens (a
// 5×32×32 latent), batch 1, text 512, random weights, as
// bench/torch_train_block.py does in PyTorch: the block's training
// forward, then its backward from a random output gradient down to the
// gradient of its input.
//
//	lora: rank-32 adapters (scale 1) on the ten default targets (attn1 and
//	      attn2 q, k, v, out; ffn.net.0.proj, ffn.net.2) are all that trains;
//	full: every weight of the block trains, and the gradients of the
//	      modulation input and the projected text flow back too.
//
// Reported: milliseconds per step, and the step's peak device memory
// above the weights, gradients and inputs (saved activations and
// temporaries).
func BenchmarkTrainBlock1_3B(b *testing.B) {
	for _, mode := range []string{"lora", "full"} {
		b.Run(mode, func(b *testing.B) { benchTrainBlock(b, mode == "full", TrainOptions{}) })
	}
}

// BenchmarkTrainBlockKnobs1_3B is BenchmarkTrainBlock1_3B's LoRA step
// under each checkpointing mode, in fp32 and with bf16 autocast (bf16
// GEMM weights and compute dtype, bf16 saved activations): the time each
// mode's recomputation costs and the peak it saves.
func BenchmarkTrainBlockKnobs1_3B(b *testing.B) {
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
		for _, mode := range []Checkpointing{CheckpointNone, CheckpointSelective, CheckpointBlock} {
			b.Run(dt.String()+"/"+mode.String(), func(b *testing.B) {
				benchTrainBlock(b, false, TrainOptions{Checkpointing: mode, DType: dt})
			})
		}
	}
}

func benchTrainBlock(b *testing.B, full bool, opts TrainOptions) {
	cfg := Config1_3B()
	cfg.NumLayers = 1
	dim, tokens, text := cfg.InnerDim(), 5*16*16, 512
	dev := cpu.NewDevice(0)
	be := cpu.New(dev, gemm.Best())
	ops := tensor.NewOps(be)
	if opts.DType == dtype.BF16 {
		if err := be.SetComputeDType(dtype.BF16); err != nil {
			b.Fatal(err)
		}
	}
	fixed := residency.Fixed{Tensors: map[string]*tensor.Tensor{}}
	src := synthesize(cfg, 1)
	grads := map[string]*tensor.Tensor{}
	_, shapes := cfg.LinearShapes()
	for _, p := range cfg.Params() {
		if p.Block != layerBlock(0) {
			continue
		}
		d, _ := src.Get(p.Name)
		fixed.Tensors[p.Name] = ops.Upload(d, p.Shape...)
		if _, ok := shapes[strings.TrimSuffix(p.Name, ".weight")]; ok && opts.DType == dtype.BF16 {
			w := fixed.Tensors[p.Name]
			fixed.Tensors[p.Name] = ops.Cast(w, dtype.BF16)
			w.Free()
		}
		if full {
			grads[p.Name] = ops.Zeros(p.Shape...)
		}
	}
	m := New(cfg)
	m.Component("transformer", nil)
	m.Train = opts
	var adapters []LoRA
	if !full {
		adapters = benchLoRA(ops, cfg, 32)
		if err := m.SetLoRA(adapters); err != nil {
			b.Fatal(err)
		}
	}
	hidden := ops.Upload(modeltest.Randn(2, tokens*dim), 1, tokens, dim)
	mods := ops.Upload(scaled(modeltest.Randn(3, 6*dim), 0.1), 1, 6, dim)
	ctx := ops.Upload(modeltest.Randn(4, text*dim), 1, text, dim)
	dout := ops.Upload(modeltest.Randn(5, tokens*dim), 1, tokens, dim)
	var dmods, dtext *tensor.Tensor
	if full {
		dmods, dtext = ops.Zeros(1, 6, dim), ops.Zeros(1, text, dim)
	}
	defer func() {
		tensor.Free(hidden, mods, ctx, dout, dmods, dtext)
		for _, t := range fixed.Tensors {
			t.Free()
		}
		for _, g := range grads {
			g.Free()
		}
		for _, a := range adapters {
			tensor.Free(a.A, a.B, a.GradA, a.GradB)
		}
	}()
	if err := ops.Err(); err != nil {
		b.Fatal(err)
	}
	step := func() {
		dh, err := m.TrainBlock(fixed, ops, 0, [3]int{5, 32, 32}, hidden, mods, ctx, dout, grads, dmods, dtext)
		if err != nil {
			b.Fatal(err)
		}
		dh.Free()
	}
	base := dev.Stats().Allocated
	dev.ResetPeakStats()
	step() // warm the allocator and the GEMM's threads
	peak := dev.Stats().PeakAllocated - base
	b.ResetTimer()
	for range b.N {
		step()
	}
	b.StopTimer()
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/step")
	b.ReportMetric(float64(peak)/(1<<20), "MiB-peak")
}

// benchLoRA makes rank-r adapters with gradients on the ten default
// targets of block 0: A uniform in ±1/√in (PEFT's Kaiming init), B small
// but non-zero so every product does real work.
func benchLoRA(ops *tensor.Ops, cfg Config, r int) []LoRA {
	names, shapes := cfg.LinearShapes()
	var ls []LoRA
	seed := uint64(10)
	for _, n := range names {
		if !strings.HasPrefix(n, "blocks.0.") {
			continue
		}
		out, in := shapes[n][0], shapes[n][1]
		a := modeltest.Randn(seed, r*in)
		for i := range a {
			a[i] = float32(math.Erf(float64(a[i])/math.Sqrt2)) / float32(math.Sqrt(float64(in))) // N(0,1) → uniform(−1, 1)
		}
		l := LoRA{Module: n, A: ops.Upload(a, r, in), B: ops.Upload(scaled(modeltest.Randn(seed+1, out*r), 0.01), out, r), Scale: 1}
		l.GradA, l.GradB = ops.Zeros(r, in), ops.Zeros(out, r)
		ls = append(ls, l)
		seed += 2
	}
	return ls
}

// scaled multiplies d by s in place and returns it.
func scaled(d []float32, s float32) []float32 {
	for i := range d {
		d[i] *= s
	}
	return d
}
