package lora

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Adapter is one Linear's low-rank pair as stored, with the bias some
// files add: y += (Alpha/Rank)·B(A·x) + Bias.
type Adapter struct {
	Module        string    // diffusers state-dict module name, e.g. "blocks.0.attn1.to_q"
	A             []float32 // [Rank, In]
	B             []float32 // [Out, Rank]
	Rank, In, Out int       // Rank and In 0: a bias alone
	Alpha         float32   // Rank when the file stores none (scale 1)
	// HasBias says the file holds a bias for the module (ComfyUI's diff_b,
	// PEFT's lora_B.bias); Bias holds it, [Out], once the values are read,
	// already times alpha/rank where the file's naming scales it.
	HasBias bool
	Bias    []float32
}

// Scale is the factor the adapter's product is applied with: Alpha/Rank.
func (a Adapter) Scale() float32 { return a.Alpha / float32(a.Rank) }

// BiasOnly says the adapter is a bias without a pair.
func (a Adapter) BiasOnly() bool { return a.Rank == 0 }

// DefaultTargets are the Linears of every transformer block that LoRA
// trainers adapt by default (diffusers' and musubi-tuner's Wan recipes):
// both attentions' projections and the feed-forward.
var DefaultTargets = []string{"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2"}

// Targets returns the module names among names that end in one of
// targets at a dot boundary ("attn1.to_q" selects "blocks.3.attn1.to_q"
// and "attn1.to_q" itself, not "xattn1.to_q"), sorted and without repeats.
// Pass the model's Linears (wan.Config.LinearShapes) as names.
func Targets(names []string, targets []string) []string {
	var out []string
	for _, n := range names {
		for _, t := range targets {
			if n == t || strings.HasSuffix(n, "."+t) {
				out = append(out, n)
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Check reports the first adapter that does not fit a model whose Linears
// have the given [out, in] sizes by module name: a module the model lacks,
// or sizes that differ. Adapters are checked in order.
func Check(ads []Adapter, shapes map[string][2]int) error {
	for _, a := range ads {
		s, ok := shapes[a.Module]
		if !ok {
			return fmt.Errorf("adapter for %q: the model has no such Linear (is the LoRA for another Wan model?)", a.Module)
		}
		if a.Out != s[0] || (!a.BiasOnly() && a.In != s[1]) {
			return fmt.Errorf("adapter for %q is %d→%d features but the model's Linear is %d→%d (is the LoRA for another Wan model size?)",
				a.Module, a.In, a.Out, s[1], s[0])
		}
	}
	return nil
}

// Bytes is the float32 bytes of the adapters' A and B matrices and biases.
func Bytes(ads []Adapter) int64 {
	var n int64
	for _, a := range ads {
		n += 4 * int64(len(a.A)+len(a.B)+len(a.Bias))
	}
	return n
}

// valid checks an adapter's own consistency (for Write).
func (a Adapter) valid() error {
	switch {
	case a.Rank <= 0 || a.In <= 0 || a.Out <= 0:
		return fmt.Errorf("adapter for %q: rank %d, in %d, out %d must be > 0", a.Module, a.Rank, a.In, a.Out)
	case len(a.A) != a.Rank*a.In:
		return fmt.Errorf("adapter for %q: A holds %d values, want rank·in = %d·%d", a.Module, len(a.A), a.Rank, a.In)
	case len(a.B) != a.Out*a.Rank:
		return fmt.Errorf("adapter for %q: B holds %d values, want out·rank = %d·%d", a.Module, len(a.B), a.Out, a.Rank)
	case a.HasBias || a.Bias != nil:
		return fmt.Errorf("adapter for %q has a bias: ferry writes lora_A/lora_B pairs only", a.Module)
	case a.Alpha == 0 || !finite(a.Alpha):
		return fmt.Errorf("adapter for %q: alpha %g (set it; Rank gives scale 1)", a.Module, a.Alpha)
	}
	if m, _, err := parseKey(a.Module + ".lora_A.weight"); err != nil || m != a.Module {
		return fmt.Errorf("adapter for %q: not a diffusers Wan transformer Linear name (e.g. blocks.0.attn1.to_q)", a.Module)
	}
	return nil
}

func finite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
