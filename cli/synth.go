package cli

import (
	"fmt"
	"strings"
	"time"

	"ferry/dtype"
	"ferry/synth"
	"ferry/tensor"
)

func init() {
	register("synth", "write a random-weight checkpoint in the diffusers layout", runSynth)
}

func runSynth(e *env, args []string) error {
	fs := newFlags(e, "synth", "--arch NAME --out DIR [--seed N] [--dtype bf16|fp32]")
	arch := fs.String("arch", "synthetic", "architecture: "+strings.Join(synth.Names(), ", "))
	out := fs.String("out", "", "folder to create (must not exist)")
	seed := fs.Uint64("seed", 0, "seed: the same seed writes the same weights")
	dt := fs.String("dtype", "", "storage dtype of the weights: bf16, fp16 or fp32 (default: as the architecture publishes them, bf16; fp32 for wan2.2-t2v-a14b's experts)")
	quiet := fs.Bool("quiet", false, "print nothing but errors")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return userf("--out DIR is required (the folder to create)")
	}
	a, err := synth.Lookup(*arch)
	if err != nil {
		return asUser(err)
	}
	storage := a.DType
	if storage == 0 {
		storage = dtype.BF16
	}
	if *dt != "" {
		var err error
		if storage, err = parseDType(*dt); err != nil {
			return err
		}
	}
	opt := synth.Options{Seed: *seed, DType: storage}
	total := synth.TotalBytes(a, opt)
	start := time.Now()
	if !*quiet {
		fmt.Fprintf(e.stderr, "synth %s: %s of %s weights into %s\n", a.Name, tensor.FormatBytes(total), storage, *out)
		last := time.Now()
		opt.Progress = func(done, total int64) {
			if time.Since(last) > 2*time.Second || done == total {
				last = time.Now()
				fmt.Fprintf(e.stderr, "  %s / %s\n", tensor.FormatBytes(done), tensor.FormatBytes(total))
			}
		}
	}
	if err := synth.Write(*out, a, opt); err != nil {
		return asUser(err)
	}
	if !*quiet {
		fmt.Fprintf(e.stderr, "synth %s: done in %.1fs\n", a.Name, time.Since(start).Seconds())
	}
	return nil
}

func parseDType(s string) (dtype.DType, error) {
	switch strings.ToLower(s) {
	case "bf16", "bfloat16":
		return dtype.BF16, nil
	case "fp16", "f16", "float16":
		return dtype.F16, nil
	case "fp32", "f32", "float32":
		return dtype.F32, nil
	}
	return 0, userf("unknown dtype %q (use bf16, fp16 or fp32)", s)
}
