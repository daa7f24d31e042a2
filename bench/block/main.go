// Command block times one Wan2.1 transformer block in ferry on the CPU,
// with random weights (no checkpoint): the Go half of bench/compare.sh.
//
//	go run ./bench/block -dtype fp32 -rounds 3
//
// It builds the 1.3B configuration with one layer, registers it with the
// residency executor over an in-memory source (fp32: weights widened on
// the device; bf16: GEMM weights kept bf16 and packed), runs a warm-up
// forward pass and then -rounds timed ones, and prints the
// time of the block alone (the embedding and output blocks are not
// counted), one line per round: "ferry-<dtype> <seconds>".
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/bench"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "block:", err)
		os.Exit(1)
	}
}

type options struct {
	dtype                  string
	rounds                 int
	batch, frames, textLen int
	height, width          int
	cpuProfile             string
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.dtype, "dtype", "fp32", "compute dtype: fp32 or bf16")
	flag.IntVar(&o.rounds, "rounds", 3, "timed forward passes")
	flag.IntVar(&o.batch, "batch", 2, "batch (2: both CFG branches)")
	flag.IntVar(&o.frames, "frames", 5, "latent frames")
	flag.IntVar(&o.height, "height", 32, "latent height (tokens: frames·height/2·width/2)")
	flag.IntVar(&o.width, "width", 32, "latent width")
	flag.IntVar(&o.textLen, "text", 512, "text tokens")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed passes here")
	flag.Parse()
	return o
}

func run() error {
	o := parseFlags()
	if o.dtype != "fp32" && o.dtype != "bf16" {
		return fmt.Errorf("-dtype %q: want fp32 or bf16", o.dtype)
	}
	cfg := wan.Config1_3B()
	cfg.NumLayers = 1
	model := wan.New(cfg)
	src := bench.RandomSource(cfg.Params(), 1)

	be := cpu.New(cpu.NewDevice(0), gemm.Best())
	ops := tensor.NewOps(be)
	comp := model.Component("transformer", src)
	runner, closeRunner, err := newRunner(o.dtype, be, comp)
	if err != nil {
		return err
	}
	defer closeRunner()
	timer := &blockTimer{inner: runner, block: comp.Blocks[1]}

	rng := rand.New(rand.NewPCG(2, 3))
	latents := ops.Upload(normals(rng, o.batch*cfg.InChannels*o.frames*o.height*o.width), o.batch, cfg.InChannels, o.frames, o.height, o.width)
	context := ops.Upload(normals(rng, o.batch*o.textLen*cfg.TextDim), o.batch, o.textLen, cfg.TextDim)
	if err := ops.Err(); err != nil {
		return err
	}
	steps := make([]float32, o.batch)
	for i := range steps {
		steps[i] = 500
	}
	tokens := o.frames * o.height / 2 * o.width / 2
	fmt.Fprintf(os.Stderr, "ferry %s: Wan2.1-1.3B block, %d tokens, batch %d, text %d, gemm %s, bf16 gemm %s (%s)\n",
		o.dtype, tokens, o.batch, o.textLen, be.GEMM().Name(), be.BF16GEMM().Name(), gemm.DefaultBF16().Kernel())
	for round := range o.rounds + 1 {
		out, err := model.Forward(timer, ops, latents, steps, context)
		if err != nil {
			return err
		}
		out.Free()
		if round > 0 { // round 0 warms up: first-touch pages, packing buffers
			fmt.Printf("ferry-%s %.4f\n", o.dtype, timer.last.Seconds())
		} else if o.cpuProfile != "" {
			stop, err := startProfile(o.cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
		}
	}
	return nil
}

// newRunner returns the residency executor with everything resident: fp32
// (weights widened to F32) or bf16 (GEMM weights kept bf16 on the device,
// packed as they are loaded, and bf16 compute), as ferry generate runs.
func newRunner(dt string, be *cpu.Backend, comp *residency.Component) (residency.Runner, func(), error) {
	matrix := dtype.F32
	if dt == "bf16" {
		matrix = dtype.BF16
		if err := be.SetComputeDType(dtype.BF16); err != nil {
			return nil, nil, err
		}
	}
	exec, err := residency.New(residency.Config{Backend: be, HostBackend: be, MatrixDType: matrix})
	if err != nil {
		return nil, nil, err
	}
	if err := exec.Register(comp); err != nil {
		exec.Close()
		return nil, nil, err
	}
	return exec, exec.Close, nil
}

// blockTimer times the compute of one block (weights already in place:
// the warm-up pass loaded them and the plan keeps them resident).
type blockTimer struct {
	inner residency.Runner
	block *residency.Block
	last  time.Duration
}

func (t *blockTimer) Run(b *residency.Block, fn func() error) error {
	if b != t.block {
		return t.inner.Run(b, fn)
	}
	return t.inner.Run(b, func() error {
		start := time.Now()
		err := fn()
		t.last = time.Since(start)
		return err
	})
}

// startProfile starts a CPU profile into path; the returned func stops it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func normals(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}
