// Package synthetic is a small transformer-shaped model with random weights
// that exercises every placement end to end: a text encoder (embedding table
// read by row, a few attention+MLP layers), a denoiser of N attention+MLP
// blocks with configurable width and depth, and a tiny decoder. Its numbers
// mean nothing; its memory and compute shapes are those of a real DiT.
package synthetic

import (
	"encoding/json"
	"fmt"
	"math"

	"ferry/residency"
	"ferry/tensor"
)

// Config sizes the three components. It is stored, split per component, in
// a diffusers-style folder written by `ferry synth`.
type Config struct {
	Vocab        int `json:"vocab_size"`
	TextDim      int `json:"text_dim"`
	TextLayers   int `json:"text_layers"`
	TextHeads    int `json:"text_heads"`
	TextLen      int `json:"text_len"`
	Dim          int `json:"dim"`
	Heads        int `json:"num_heads"`
	Layers       int `json:"num_layers"`
	MLPRatio     int `json:"mlp_ratio"`
	Channels     int `json:"in_channels"`
	Patch        int `json:"patch_size"`
	DecoderWidth int `json:"decoder_width"`
	FreqDim      int `json:"freq_dim"`
}

// Default is the demo's model: 24 blocks of width 512.
func Default() Config {
	return Config{Vocab: 256, TextDim: 256, TextLayers: 2, TextHeads: 4, TextLen: 32,
		Dim: 512, Heads: 8, Layers: 24, MLPRatio: 4, Channels: 16, Patch: 2, DecoderWidth: 256, FreqDim: 64}
}

// Validate says what is wrong with a config.
func (c Config) Validate() error {
	pos := map[string]int{"vocab_size": c.Vocab, "text_dim": c.TextDim, "text_layers": c.TextLayers,
		"text_heads": c.TextHeads, "text_len": c.TextLen, "dim": c.Dim, "num_heads": c.Heads, "num_layers": c.Layers,
		"mlp_ratio": c.MLPRatio, "in_channels": c.Channels, "patch_size": c.Patch, "decoder_width": c.DecoderWidth, "freq_dim": c.FreqDim}
	for k, v := range pos {
		if v <= 0 {
			return fmt.Errorf("synthetic config: %s must be > 0, got %d", k, v)
		}
	}
	if c.Dim%c.Heads != 0 || c.TextDim%c.TextHeads != 0 {
		return fmt.Errorf("synthetic config: dims %d/%d not divisible by heads %d/%d", c.Dim, c.TextDim, c.Heads, c.TextHeads)
	}
	if c.FreqDim%2 != 0 {
		return fmt.Errorf("synthetic config: freq_dim must be even, got %d", c.FreqDim)
	}
	return nil
}

// ParseConfig reads a config.json (any component's: they all carry it whole).
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("synthetic config: %w", err)
	}
	return c, c.Validate()
}

type linear struct {
	W *tensor.Tensor `w:"weight"`
	B *tensor.Tensor `w:"bias"`
}

type norm struct {
	W *tensor.Tensor `w:"weight"`
	B *tensor.Tensor `w:"bias"`
}

// layer is one attention + MLP block, used by the encoder and the denoiser.
type layer struct {
	Norm1 norm   `w:"norm1"`
	Q     linear `w:"attn.q"`
	K     linear `w:"attn.k"`
	V     linear `w:"attn.v"`
	O     linear `w:"attn.o"`
	Norm2 norm   `w:"norm2"`
	Up    linear `w:"mlp.fc1"`
	Down  linear `w:"mlp.fc2"`
}

// specs collects the parameters of one block.
type specs struct {
	block, prefix string
	list          []residency.ParamSpec
}

func (s *specs) add(name string, shape ...int) {
	s.list = append(s.list, residency.ParamSpec{Block: s.block, Name: s.prefix + name, Shape: shape})
}

func (s *specs) linear(name string, out, in int) {
	s.add(name+".weight", out, in)
	s.add(name+".bias", out)
}

func (s *specs) norm(name string, dim int) {
	s.add(name+".weight", dim)
	s.add(name+".bias", dim)
}

func (s *specs) layer(dim, hidden int) {
	s.norm("norm1", dim)
	for _, n := range []string{"attn.q", "attn.k", "attn.v", "attn.o"} {
		s.linear(n, dim, dim)
	}
	s.norm("norm2", dim)
	s.linear("mlp.fc1", hidden, dim)
	s.linear("mlp.fc2", dim, hidden)
}

// forward runs one block on x [B, L, dim] in place of x (returns the new x,
// frees the old).
func (l *layer) forward(ops *tensor.Ops, x *tensor.Tensor, heads int) *tensor.Tensor {
	b, n, d := x.Dim(0), x.Dim(1), x.Dim(2)
	h := ops.LayerNorm(x, l.Norm1.W, l.Norm1.B, 1e-5)
	q, k, v := ops.Linear(h, l.Q.W, l.Q.B), ops.Linear(h, l.K.W, l.K.B), ops.Linear(h, l.V.W, l.V.B)
	h.Free()
	shape := []int{b, n, heads, d / heads}
	a := ops.Attention(reshape(ops, q, shape), reshape(ops, k, shape), reshape(ops, v, shape), nil, float32(1/math.Sqrt(float64(d/heads))))
	tensor.Free(q, k, v)
	o := ops.Linear(reshape(ops, a, []int{b, n, d}), l.O.W, l.O.B)
	a.Free()
	ops.AddInPlace(x, o)
	o.Free()
	h = ops.LayerNorm(x, l.Norm2.W, l.Norm2.B, 1e-5)
	up := ops.Linear(h, l.Up.W, l.Up.B)
	h.Free()
	ops.UnaryInPlace(up, tensor.GELUTanh)
	down := ops.Linear(up, l.Down.W, l.Down.B)
	up.Free()
	ops.AddInPlace(x, down)
	down.Free()
	return x
}

// reshape views t with a new shape, recording a failure in ops.
func reshape(ops *tensor.Ops, t *tensor.Tensor, shape []int) *tensor.Tensor {
	v, err := t.Reshape(shape...)
	if err != nil {
		ops.Fail(err)
		return t
	}
	return v
}

// sinusoid is the usual sin/cos timestep embedding, computed on the host.
func sinusoid(t float32, dim int) []float32 {
	out := make([]float32, dim)
	half := dim / 2
	for i := range half {
		f := math.Exp(-math.Log(10000) * float64(i) / float64(half))
		out[i] = float32(math.Cos(float64(t) * f))
		out[half+i] = float32(math.Sin(float64(t) * f))
	}
	return out
}
