package umt5

import (
	"strings"

	"ferry/checkpoint"
)

// The Wan repositories keep the text encoder in their own T5 layout
// ("models_t5_umt5-xxl-enc-bf16.pth": token_embedding, blocks.N.attn.q,
// blocks.N.ffn.gate.0, blocks.N.pos_embedding.embedding, norm), the
// encoder of wan/modules/t5.py. Its weights are google/umt5-xxl's, so a
// text_encoder folder holding that file opens with its names mapped to
// transformers' UMT5EncoderModel names. (T5's shared position table, a
// top-level pos_embedding, is block 0's relative_attention_bias there.)
func init() {
	n := checkpoint.Naming{Detect: originalLayout, Rename: func(n string) (string, bool) { return transformersName(n), true }}
	checkpoint.RegisterNaming("UMT5EncoderModel", n)
	checkpoint.RegisterNaming("T5EncoderModel", n)
}

// originalLayout says names are wan/modules/t5.py's.
func originalLayout(names []string) bool {
	for _, n := range names {
		if n == "token_embedding.weight" || (strings.HasPrefix(n, "blocks.") && strings.Contains(n, ".attn.")) {
			return true
		}
	}
	return false
}

// blockParts maps the tail of a block's name, after "blocks.N.".
var blockParts = map[string]string{
	"norm1.weight":                   "layer.0.layer_norm.weight",
	"attn.q.weight":                  "layer.0.SelfAttention.q.weight",
	"attn.k.weight":                  "layer.0.SelfAttention.k.weight",
	"attn.v.weight":                  "layer.0.SelfAttention.v.weight",
	"attn.o.weight":                  "layer.0.SelfAttention.o.weight",
	"pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
	"norm2.weight":                   "layer.1.layer_norm.weight",
	"ffn.gate.0.weight":              "layer.1.DenseReluDense.wi_0.weight", // gelu(gate(x)) * fc1(x)
	"ffn.fc1.weight":                 "layer.1.DenseReluDense.wi_1.weight",
	"ffn.fc2.weight":                 "layer.1.DenseReluDense.wo.weight",
}

// transformersName maps one wan/modules/t5.py name to transformers'.
// Names it does not know stay as they are (the checkpoint check then names
// them).
func transformersName(n string) string {
	switch n {
	case "token_embedding.weight":
		return sharedName
	case "norm.weight":
		return finalName
	case "pos_embedding.embedding.weight":
		return layerPrefix(0) + blockParts[n]
	}
	rest, ok := strings.CutPrefix(n, "blocks.")
	if !ok {
		return n
	}
	idx, tail, ok := strings.Cut(rest, ".")
	if p, known := blockParts[tail]; ok && known {
		return "encoder.block." + idx + "." + p
	}
	return n
}
