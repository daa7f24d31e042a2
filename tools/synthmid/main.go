// Command synthmid writes a Wan folder for scripts/serve-twomodels.sh:
// wan-tiny's text encoder and VAE with a transformer of Wan 2.1 1.3B's
// width (12 heads of 128, feed-forward 8960) and fewer layers, so that
// loading it takes seconds while a small request computes quickly.
//
//	go run ./tools/synthmid --out DIR [--seed N] [--layers N]
package main

import (
	"flag"
	"fmt"
	"os"

	"ferry/catalog"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/synth"
)

func main() {
	out := flag.String("out", "", "folder to create (must not exist)")
	seed := flag.Uint64("seed", 1, "seed of the weights")
	layers := flag.Int("layers", 8, "transformer layers (about 92 MB of bf16 each)")
	flag.Parse()
	if *out == "" || *layers < 1 {
		fmt.Fprintln(os.Stderr, "usage: synthmid --out DIR [--seed N] [--layers N]")
		os.Exit(2)
	}
	w := catalog.WanTiny()
	tr := wan.Config1_3B()
	tr.NumLayers, tr.TextDim = *layers, w.Text.DModel
	w.Name, w.Transformer = "wan-mid", tr
	a, err := synth.Wan(w)
	if err == nil {
		err = synth.Write(*out, a, synth.Options{Seed: *seed, DType: dtype.BF16})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "synthmid:", err)
		os.Exit(1)
	}
}
