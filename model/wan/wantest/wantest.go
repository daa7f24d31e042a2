// Package wantest writes Wan checkpoints in the other layouts users
// download, for tests: the Wan repositories' own names (ComfyUI's files,
// the transformer's under "model.diffusion_model.", and the VAE's) and
// ComfyUI's scaled fp8. Only tests import it.
package wantest

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/checkpoint/torchtest"
	"ferry/dtype"
)

// OriginalPrefix wraps the names of ComfyUI's single-file checkpoints.
const OriginalPrefix = "model.diffusion_model."

var (
	blockNorm2 = regexp.MustCompile(`^(blocks\.\d+)\.norm2\.`)
	blockMod   = regexp.MustCompile(`^(blocks\.\d+)\.scale_shift_table$`)
)

// OriginalName spells a diffusers transformer name as the Wan repositories
// do (the inverse of model/wan's mapping, written out separately), under
// ComfyUI's prefix.
func OriginalName(n string) string {
	for _, r := range [][2]string{
		{"condition_embedder.image_embedder.norm1", "img_emb.proj.0"},
		{"condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"},
		{"condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"},
		{"condition_embedder.image_embedder.norm2", "img_emb.proj.4"},
		{"condition_embedder.image_embedder.pos_embed", "img_emb.emb_pos"},
		{"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
		{"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
		{"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
		{"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
		{"condition_embedder.time_proj", "time_projection.1"},
		{"attn1.to_out.0", "self_attn.o"},
		{"attn2.to_out.0", "cross_attn.o"},
		{"attn2.add_k_proj", "cross_attn.k_img"},
		{"attn2.add_v_proj", "cross_attn.v_img"},
		{"attn2.norm_added_k", "cross_attn.norm_k_img"},
		{"attn1.to_", "self_attn."},
		{"attn2.to_", "cross_attn."},
		{"attn1.", "self_attn."},
		{"attn2.", "cross_attn."},
		{"ffn.net.0.proj", "ffn.0"},
		{"ffn.net.2", "ffn.2"},
		{"proj_out", "head.head"},
	} {
		n = strings.ReplaceAll(n, r[0], r[1])
	}
	n = blockNorm2.ReplaceAllString(n, "$1.norm3.")
	n = blockMod.ReplaceAllString(n, "$1.modulation")
	if n == "scale_shift_table" {
		n = "head.modulation"
	}
	return OriginalPrefix + n
}

// Same keeps a name.
func Same(n string) string { return n }

// Convert replaces one tensor, given its name in the source, by one or
// several.
type Convert func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor

// WriteComponent writes the weights of component folder src (config.json
// and one or more safetensors) into folder dst as one file, each tensor
// renamed by name and, when conv is set, replaced by what conv returns.
func WriteComponent(t *testing.T, src, dst string, name func(string) string, conv Convert) {
	t.Helper()
	writeComponent(t, src, dst, name, conv, func(out []checkpoint.RawTensor) error {
		return checkpoint.WriteFile(filepath.Join(dst, "diffusion_pytorch_model.safetensors"), out, nil)
	})
}

// WriteTorchComponent is WriteComponent writing the weights as a PyTorch
// zip checkpoint named file (as the Wan repositories ship their VAE and
// text encoder: Wan2.1_VAE.pth, models_t5_umt5-xxl-enc-bf16.pth).
func WriteTorchComponent(t *testing.T, src, dst, file string, name func(string) string) {
	t.Helper()
	writeComponent(t, src, dst, name, nil, func(out []checkpoint.RawTensor) error {
		return torchtest.Write(filepath.Join(dst, file), out)
	})
}

func writeComponent(t *testing.T, src, dst string, name func(string) string, conv Convert, write func([]checkpoint.RawTensor) error) {
	t.Helper()
	s, err := checkpoint.OpenSet(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []checkpoint.RawTensor
	for _, n := range s.Names() {
		r := readRaw(t, s, n)
		r.Name = name(n)
		if conv == nil {
			out = append(out, r)
			continue
		}
		out = append(out, conv(n, r)...)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := write(out); err != nil {
		t.Fatal(err)
	}
	copyConfig(t, src, dst)
}

// readRaw reads tensor n of s whole, under its own name.
func readRaw(t *testing.T, s *checkpoint.Set, n string) checkpoint.RawTensor {
	t.Helper()
	info, ok := s.Lookup(n)
	if !ok {
		t.Fatalf("%s lacks %s", s.Path(), n)
	}
	data := make([]byte, info.Size)
	if err := s.ReadAt(info, data); err != nil {
		t.Fatal(err)
	}
	return checkpoint.RawTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data}
}

// copyConfig copies a component's config.json from src to dst.
func copyConfig(t *testing.T, src, dst string) {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// t5Parts maps a transformers UMT5 layer's names (after
// "encoder.block.N.") to wan/modules/t5.py's (after "blocks.N."), written
// independently of model/umt5's mapping so the test checks it.
var t5Parts = map[string]string{
	"layer.0.layer_norm.weight":                            "norm1.weight",
	"layer.0.SelfAttention.q.weight":                       "attn.q.weight",
	"layer.0.SelfAttention.k.weight":                       "attn.k.weight",
	"layer.0.SelfAttention.v.weight":                       "attn.v.weight",
	"layer.0.SelfAttention.o.weight":                       "attn.o.weight",
	"layer.0.SelfAttention.relative_attention_bias.weight": "pos_embedding.embedding.weight",
	"layer.1.layer_norm.weight":                            "norm2.weight",
	"layer.1.DenseReluDense.wi_0.weight":                   "ffn.gate.0.weight",
	"layer.1.DenseReluDense.wi_1.weight":                   "ffn.fc1.weight",
	"layer.1.DenseReluDense.wo.weight":                     "ffn.fc2.weight",
}

// OriginalT5Name is wan/modules/t5.py's name for a transformers UMT5
// encoder name (the layout of models_t5_umt5-xxl-enc-bf16.pth).
func OriginalT5Name(n string) string {
	switch n {
	case "shared.weight":
		return "token_embedding.weight"
	case "encoder.final_layer_norm.weight":
		return "norm.weight"
	}
	rest, ok := strings.CutPrefix(n, "encoder.block.")
	if !ok {
		return n
	}
	idx, tail, _ := strings.Cut(rest, ".")
	if to, ok := t5Parts[tail]; ok {
		return "blocks." + idx + "." + to
	}
	return n
}

// quantizeE4M3 returns the E4M3 code nearest v (no NaN codes).
func quantizeE4M3(v float32) byte {
	best, bestErr := byte(0), math.Inf(1)
	for c := range 256 {
		if c&0x7f == 0x7f {
			continue
		}
		if e := math.Abs(float64(dtype.F8E4M3ToF32(byte(c)) - v)); e < bestErr {
			best, bestErr = byte(c), e
		}
	}
	return best
}

// ScaledFP8 quantizes every 2-D float32 weight to E4M3 with a per-tensor
// scale (its largest magnitude over E4M3's, 448), as ComfyUI's fp8_scaled
// files store it: the fp8 weight and NAME.scale_weight; with the patch
// embedding, the scaled_fp8 marker. Tensors keep names are left as they
// are (nil: none). Each weight's dequantized values (code value times
// scale, in float32) go to deq under its source name.
func ScaledFP8(deq map[string][]float32, keep func(from string) bool) Convert {
	return func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor {
		if from == "patch_embedding.weight" {
			return []checkpoint.RawTensor{r, {Name: strings.TrimSuffix(r.Name, "patch_embedding.weight") + "scaled_fp8", DType: dtype.F8E4M3, Shape: []int{0}}}
		}
		if len(r.Shape) != 2 || r.DType != dtype.F32 || !strings.HasSuffix(r.Name, ".weight") || keep != nil && keep(from) {
			return []checkpoint.RawTensor{r}
		}
		vals := make([]float32, len(r.Data)/4)
		var amax float32
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.Data[4*i:]))
			amax = max(amax, float32(math.Abs(float64(vals[i]))))
		}
		scale := amax / 448
		codes := make([]byte, len(vals))
		d := make([]float32, len(vals))
		for i, v := range vals {
			codes[i] = quantizeE4M3(v / scale)
			d[i] = dtype.F8E4M3ToF32(codes[i]) * scale
		}
		deq[from] = d
		sc := make([]byte, 4)
		binary.LittleEndian.PutUint32(sc, math.Float32bits(scale))
		return []checkpoint.RawTensor{
			{Name: r.Name, DType: dtype.F8E4M3, Shape: r.Shape, Data: codes},
			{Name: strings.TrimSuffix(r.Name, "weight") + "scale_weight", DType: dtype.F32, Shape: []int{}, Data: sc},
		}
	}
}

// Dequantized replaces each weight ScaledFP8 quantized by its dequantized
// float32 values (deq, by source name).
func Dequantized(deq map[string][]float32) Convert {
	return func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor {
		if d, ok := deq[from]; ok {
			r.Data = make([]byte, 4*len(d))
			for i, v := range d {
				binary.LittleEndian.PutUint32(r.Data[4*i:], math.Float32bits(v))
			}
		}
		return []checkpoint.RawTensor{r}
	}
}

// vaeParts are a residual block's layers in diffusers' names and the
// original Sequential's indices.
var vaeParts = [][2]string{
	{"norm1.gamma", "residual.0.gamma"}, {"conv1.", "residual.2."}, {"norm2.gamma", "residual.3.gamma"},
	{"conv2.", "residual.6."}, {"conv_shortcut.", "shortcut."},
}

var (
	vaeLevel     = regexp.MustCompile(`^(encoder\.down|decoder\.up)_blocks\.(\d)\.(resnets\.(\d)|downsampler|upsampler)\.(.*)$`)
	vaeUpResnet  = regexp.MustCompile(`^decoder\.up_blocks\.(\d)\.resnets\.(\d)\.(.*)$`)
	vaeUpsampler = regexp.MustCompile(`^decoder\.up_blocks\.(\d)\.upsamplers\.0\.(.*)$`)
	vaeMid       = regexp.MustCompile(`^(encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d)\.(.*)$`)
	vaeDown      = regexp.MustCompile(`^encoder\.down_blocks\.(\d+)\.(.*)$`)
)

func vaePart(p string) string {
	for _, r := range vaeParts {
		if rest, ok := strings.CutPrefix(p, r[0]); ok {
			return r[1] + rest
		}
	}
	return p
}

// OriginalVAE22Name gives a function that spells a diffusers Wan 2.2 VAE
// name as Wan2.2_VAE.pth (and ComfyUI's wan2.2_vae.safetensors) does, for
// a VAE of numResBlocks residual blocks a level: each level's layers
// nest (encoder.downsamples.L.downsamples.N, decoder.upsamples.L.upsamples.N),
// its resampler last among them; the rest is named as in Wan 2.1.
func OriginalVAE22Name(numResBlocks int) func(string) string {
	return func(n string) string {
		m := vaeLevel.FindStringSubmatch(n)
		if m == nil {
			return OriginalVAEName(n)
		}
		side, word, last := "encoder", "downsamples", numResBlocks
		if m[1] == "decoder.up" {
			side, word, last = "decoder", "upsamples", numResBlocks+1
		}
		if m[4] != "" {
			return fmt.Sprintf("%s.%s.%s.%s.%s.%s", side, word, m[2], word, m[4], vaePart(m[5]))
		}
		return fmt.Sprintf("%s.%s.%s.%s.%d.%s", side, word, m[2], word, last, m[5])
	}
}

// OriginalVAEName spells a diffusers Wan 2.1 VAE name as Wan2.1_VAE.pth
// (and ComfyUI's wan_2.1_vae.safetensors) does, written out separately
// from model/wanvae's mapping.
func OriginalVAEName(n string) string {
	atoi := func(s string) int { v, _ := strconv.Atoi(s); return v }
	switch {
	case strings.HasPrefix(n, "quant_conv."):
		return "conv1." + strings.TrimPrefix(n, "quant_conv.")
	case strings.HasPrefix(n, "post_quant_conv."):
		return "conv2." + strings.TrimPrefix(n, "post_quant_conv.")
	}
	if m := vaeUpResnet.FindStringSubmatch(n); m != nil {
		return fmt.Sprintf("decoder.upsamples.%d.%s", 4*atoi(m[1])+atoi(m[2]), vaePart(m[3]))
	}
	if m := vaeUpsampler.FindStringSubmatch(n); m != nil {
		return fmt.Sprintf("decoder.upsamples.%d.%s", 4*atoi(m[1])+3, m[2])
	}
	if m := vaeMid.FindStringSubmatch(n); m != nil {
		if m[2] == "attentions" {
			return m[1] + ".middle.1." + m[4]
		}
		return fmt.Sprintf("%s.middle.%d.%s", m[1], 2*atoi(m[3]), vaePart(m[4]))
	}
	if m := vaeDown.FindStringSubmatch(n); m != nil {
		return "encoder.downsamples." + m[1] + "." + vaePart(m[2])
	}
	for _, r := range [][2]string{{".conv_in.", ".conv1."}, {".norm_out.", ".head.0."}, {".conv_out.", ".head.2."}} {
		n = strings.Replace(n, r[0], r[1], 1)
	}
	return n
}

// WriteOriginalCLIP writes the CLIPVisionModel at src to dst as the Wan
// repositories store it (models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth,
// wan/modules/clip.py's names): the vision tower under "visual." with
// each layer's q, k and v projections fused into attn.to_qkv, the class
// and position embeddings as [1, 1, d] and [1, n, d], beside a projection
// head, a text tower tensor and a logit scale, which ferry leaves out.
func WriteOriginalCLIP(t *testing.T, src, dst, file string) {
	t.Helper()
	s, err := checkpoint.OpenSet(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := func(n string) checkpoint.RawTensor { return readRaw(t, s, n) }
	var out []checkpoint.RawTensor
	put := func(name string, r checkpoint.RawTensor, shape ...int) {
		r.Name = name
		if shape != nil {
			r.Shape = shape
		}
		out = append(out, r)
	}
	const vm = "vision_model."
	cls := read(vm + "embeddings.class_embedding")
	d := cls.Shape[0]
	pos := read(vm + "embeddings.position_embedding.weight")
	put("visual.patch_embedding.weight", read(vm+"embeddings.patch_embedding.weight"))
	put("visual.cls_embedding", cls, 1, 1, d)
	put("visual.pos_embedding", pos, 1, pos.Shape[0], d)
	for _, p := range [][2]string{{"pre_layrnorm", "pre_norm"}, {"post_layernorm", "post_norm"}} {
		put("visual."+p[1]+".weight", read(vm+p[0]+".weight"))
		put("visual."+p[1]+".bias", read(vm+p[0]+".bias"))
	}
	for i := 0; ; i++ {
		pre := fmt.Sprintf("%sencoder.layers.%d.", vm, i)
		if _, ok := s.Lookup(pre + "layer_norm1.weight"); !ok {
			break
		}
		to := fmt.Sprintf("visual.transformer.%d.", i)
		for _, kind := range []string{"weight", "bias"} {
			var fused checkpoint.RawTensor
			for _, proj := range []string{"q_proj", "k_proj", "v_proj"} {
				r := read(pre + "self_attn." + proj + "." + kind)
				fused.DType, fused.Data = r.DType, append(fused.Data, r.Data...)
				fused.Shape = append([]int{3 * r.Shape[0]}, r.Shape[1:]...)
			}
			put(to+"attn.to_qkv."+kind, fused)
			for _, p := range [][2]string{{"layer_norm1", "norm1"}, {"self_attn.out_proj", "attn.proj"}, {"layer_norm2", "norm2"}, {"mlp.fc1", "mlp.0"}, {"mlp.fc2", "mlp.2"}} {
				put(to+p[1]+"."+kind, read(pre+p[0]+"."+kind))
			}
		}
	}
	zeros := func(shape ...int) checkpoint.RawTensor {
		n := 4
		for _, v := range shape {
			n *= v
		}
		return checkpoint.RawTensor{DType: dtype.F32, Shape: shape, Data: make([]byte, n)}
	}
	put("visual.head", zeros(d, 8))
	put("textual.token_embedding.weight", zeros(4, 8))
	put("log_scale", zeros())
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := torchtest.Write(filepath.Join(dst, file), out); err != nil {
		t.Fatal(err)
	}
	copyConfig(t, src, dst)
}
