// Command trainblock times one training step of one Wan2.1 transformer
// block in ferry on the CPU, with random weights (no checkpoint): the Go
// half of bench/compare_train.sh.
//
//	go run ./bench/trainblock -mode lora -rounds 3
//
// A step is the block's training forward (saving what its backward needs,
// attention keeping only its log-sum-exp) and then its backward from a
// fixed random gradient of the block's output down to the gradient of its
// input, as bench/torch_train_block.py does in PyTorch:
//
//	lora: rank -rank adapters (scale 1) on the ten default targets are
//	      all that trains; the base weights are frozen;
//	full: every weight of the block trains, and the gradients of the
//	      modulation input and the projected text flow back too.
//
// Weights are fp32 on the device (dense: the backward multiplies by the
// frozen weights too). It prints one line per timed round after a warm-up:
// "ferry-<mode> <seconds>".
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/bench"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trainblock:", err)
		os.Exit(1)
	}
}

type options struct {
	mode                 string
	rounds, rank         int
	frames, height, wdth int
	textLen              int
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.mode, "mode", "lora", "lora or full")
	flag.IntVar(&o.rounds, "rounds", 3, "timed steps")
	flag.IntVar(&o.rank, "rank", 32, "LoRA rank")
	flag.IntVar(&o.frames, "frames", 5, "latent frames")
	flag.IntVar(&o.height, "height", 32, "latent height (tokens: frames·height/2·width/2)")
	flag.IntVar(&o.wdth, "width", 32, "latent width")
	flag.IntVar(&o.textLen, "text", 512, "text tokens")
	flag.Parse()
	return o
}

// rig is one block's weights, inputs and gradient buffers on the device.
type rig struct {
	ops                     *tensor.Ops
	model                   *wan.Model
	weights                 residency.Fixed
	grads                   map[string]*tensor.Tensor
	adapters                []wan.LoRA
	hidden, mods, text, out *tensor.Tensor // out: the gradient of the block's output
	dmods, dtext            *tensor.Tensor
	latent                  [3]int
}

func run() error {
	o := parseFlags()
	if o.mode != "lora" && o.mode != "full" {
		return fmt.Errorf("-mode %q: want lora or full", o.mode)
	}
	be := cpu.New(cpu.NewDevice(0), gemm.Best())
	r, err := newRig(o, tensor.NewOps(be))
	if err != nil {
		return err
	}
	tokens := o.frames * o.height / 2 * o.wdth / 2
	fmt.Fprintf(os.Stderr, "ferry %s: Wan2.1-1.3B block training step, %d tokens, batch 1, text %d, rank %d, gemm %s\n",
		o.mode, tokens, o.textLen, o.rank, be.GEMM().Name())
	for round := range o.rounds + 1 {
		start := time.Now()
		if err := r.step(); err != nil {
			return err
		}
		if round > 0 { // round 0 warms up: first-touch pages, GEMM threads
			fmt.Printf("ferry-%s %.4f\n", o.mode, time.Since(start).Seconds())
		}
	}
	return nil
}

func newRig(o options, ops *tensor.Ops) (*rig, error) {
	cfg := wan.Config1_3B()
	cfg.NumLayers = 1
	full := o.mode == "full"
	r := &rig{ops: ops, model: wan.New(cfg), weights: residency.Fixed{Tensors: map[string]*tensor.Tensor{}},
		grads: map[string]*tensor.Tensor{}, latent: [3]int{o.frames, o.height, o.wdth}}
	src := bench.RandomSource(cfg.Params(), 1)
	for _, p := range cfg.Params() {
		if p.Block != "blocks.0" {
			continue
		}
		data, err := src.Float32(p.Name)
		if err != nil {
			return nil, err
		}
		r.weights.Tensors[p.Name] = ops.Upload(data, p.Shape...)
		if full {
			r.grads[p.Name] = ops.Zeros(p.Shape...)
		}
	}
	r.model.Component("transformer", src)
	if !full {
		r.adapters = adapters(ops, cfg, o.rank)
		if err := r.model.SetLoRA(r.adapters); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(2, 3))
	dim, tokens := cfg.InnerDim(), o.frames*o.height/2*o.wdth/2
	r.hidden = ops.Upload(normals(rng, tokens*dim, 1), 1, tokens, dim)
	r.mods = ops.Upload(normals(rng, 6*dim, 0.1), 1, 6, dim)
	r.text = ops.Upload(normals(rng, o.textLen*dim, 1), 1, o.textLen, dim)
	r.out = ops.Upload(normals(rng, tokens*dim, 1), 1, tokens, dim)
	if full {
		r.dmods, r.dtext = ops.Zeros(1, 6, dim), ops.Zeros(1, o.textLen, dim)
	}
	return r, ops.Err()
}

// step is one forward and backward of the block.
func (r *rig) step() error {
	dh, err := r.model.TrainBlock(r.weights, r.ops, 0, r.latent, r.hidden, r.mods, r.text, r.out, r.grads, r.dmods, r.dtext)
	if err != nil {
		return err
	}
	dh.Free()
	return nil
}

// adapters makes rank-r adapters with gradients on the ten default
// targets of block 0: A uniform in ±1/√in (PEFT's Kaiming init), B small
// but non-zero so that every product of the backward does real work.
func adapters(ops *tensor.Ops, cfg wan.Config, rank int) []wan.LoRA {
	names, shapes := cfg.LinearShapes()
	rng := rand.New(rand.NewPCG(4, 5))
	var ls []wan.LoRA
	for _, n := range names {
		if !strings.HasPrefix(n, "blocks.0.") {
			continue
		}
		out, in := shapes[n][0], shapes[n][1]
		a := make([]float32, rank*in)
		for i := range a {
			a[i] = float32((2*rng.Float64() - 1) / math.Sqrt(float64(in)))
		}
		l := wan.LoRA{Module: n, A: ops.Upload(a, rank, in), B: ops.Upload(normals(rng, out*rank, 0.01), out, rank), Scale: 1}
		l.GradA, l.GradB = ops.Zeros(rank, in), ops.Zeros(out, rank)
		ls = append(ls, l)
	}
	return ls
}

func normals(rng *rand.Rand, n int, std float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(std * rng.NormFloat64())
	}
	return s
}
