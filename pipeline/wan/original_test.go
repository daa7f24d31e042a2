package wan

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/model/wan/wantest"
)

// layoutFolder makes dst a copy of the golden A14B folder in which write
// rewrites the components comps names and the others are linked.
func layoutFolder(t *testing.T, dst string, comps []string, write func(src, dst string)) {
	t.Helper()
	layoutFolderOf(t, filepath.Join(moeDir, "pipeline"), dst, comps, write)
}

// layoutFolderOf is layoutFolder for the pipeline folder src.
func layoutFolderOf(t *testing.T, src, dst string, comps []string, write func(src, dst string)) {
	t.Helper()
	src, _ = filepath.Abs(src)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if slices.Contains(comps, e.Name()) {
			write(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// mustHold fails unless the weights in dir, opened as they are stored (no
// naming applied), hold every name given: the rewrite took.
func mustHold(t *testing.T, dir string, names ...string) {
	t.Helper()
	raw, err := checkpoint.OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, n := range names {
		if !slices.Contains(raw.Names(), n) {
			t.Fatalf("the rewritten %s lacks %s: %v", dir, n, raw.Names()[:min(4, len(raw.Names()))])
		}
	}
}

// bothExperts are the A14B folder's two transformers.
var bothExperts = []string{Transformer, Transformer2}

// A folder whose experts are stored in the Wan repositories' own layout
// (as the official single-file releases and ComfyUI's files are) opens
// with its names mapped and generates the golden case bit for bit as the
// diffusers-layout folder does.
func TestOriginalLayoutTransformer(t *testing.T) {
	dst := t.TempDir()
	layoutFolder(t, dst, bothExperts, func(src, dst string) { wantest.WriteComponent(t, src, dst, wantest.OriginalName, nil) })
	mustHold(t, filepath.Join(dst, Transformer), wantest.OriginalPrefix+"blocks.0.self_attn.q.weight",
		wantest.OriginalPrefix+"blocks.0.norm3.weight", wantest.OriginalPrefix+"head.head.weight")

	want := runMoE(t, "", nil, moeRequest(t))
	got := runMoE(t, dst, nil, moeRequest(t))
	if !slices.Equal(got.Video, want.Video) {
		t.Fatal("the original-layout folder's video differs from the diffusers-layout folder's")
	}
}

// A transformer stored as ComfyUI's fp8_scaled files store it (the
// original layout, fp8 Linear weights each with its scale_weight, the
// scaled_fp8 marker) generates what the same weights dequantized to
// float32 in diffusers' layout generate: within float32 rounding where
// the fp8 weights stay fp8 and the GEMM applies the scale to the products
// (AVX2 and AVX-512), bit for bit where they are widened to float32 with
// the scale folded in (FERRY_CPU=generic).
func TestScaledFP8Transformer(t *testing.T) {
	fp8, deqDir := t.TempDir(), t.TempDir()
	deq := map[string]map[string][]float32{}
	layoutFolder(t, fp8, bothExperts, func(src, dst string) {
		deq[src] = map[string][]float32{}
		wantest.WriteComponent(t, src, dst, wantest.OriginalName, wantest.ScaledFP8(deq[src], nil))
	})
	layoutFolder(t, deqDir, bothExperts, func(src, dst string) {
		wantest.WriteComponent(t, src, dst, wantest.Same, wantest.Dequantized(deq[src]))
	})
	s, err := checkpoint.OpenSet(filepath.Join(fp8, Transformer))
	if err != nil {
		t.Fatal(err)
	}
	if s.Scale(wantest.OriginalPrefix+"blocks.0.self_attn.q.weight") == 1 {
		t.Fatal("the fp8 file has no scale for blocks.0.self_attn.q")
	}
	s.Close()

	closeVideos(t, runMoE(t, fp8, nil, moeRequest(t)), runMoE(t, deqDir, nil, moeRequest(t)))
}

// closeVideos checks a scaled fp8 folder's video against its dequantized
// twin's. Pixels are in [0, 1]; float32 rounding of the products moves
// them by about 1e-6 here, where a scale left out or applied twice moves
// them by whole percents (the quantization alone moves them by 2e-3).
func closeVideos(t *testing.T, got, want *Output) {
	t.Helper()
	var worst float64
	for i := range want.Video {
		worst = max(worst, math.Abs(float64(got.Video[i]-want.Video[i])))
	}
	if worst > 1e-4 {
		t.Fatalf("the scaled fp8 folder's video differs from the dequantized one's by up to %g", worst)
	}
	t.Logf("largest pixel difference %g", worst)
}

// ComfyUI's scaled fp8 text encoders keep UMT5's names (transformers'),
// with fp8 Linear weights and their scale_weight beside them: put in place
// of a folder's text_encoder weights, they give the video the weights
// dequantized to float32 give, to float32 rounding (bit for bit under
// FERRY_CPU=generic). The embedding tables stay wide, as ComfyUI leaves
// them (a scaled row table is refused).
func TestScaledFP8TextEncoder(t *testing.T) {
	tables := func(from string) bool {
		return from == "shared.weight" || from == "encoder.embed_tokens.weight" || strings.Contains(from, "relative_attention_bias")
	}
	deq := map[string][]float32{}
	folder := func(conv wantest.Convert) string {
		dst := t.TempDir()
		layoutFolder(t, dst, []string{TextEncoder}, func(src, dst string) { wantest.WriteComponent(t, src, dst, wantest.Same, conv) })
		return dst
	}
	fp8 := folder(wantest.ScaledFP8(deq, tables))
	if len(deq) == 0 {
		t.Fatal("no text-encoder weight was quantized")
	}
	f32 := folder(wantest.Dequantized(deq))
	r := moeRequest(t)
	r.Steps = 1
	closeVideos(t, runMoE(t, fp8, nil, r), runMoE(t, f32, nil, r))
}

// A VAE stored as Wan2.1_VAE.pth and ComfyUI's wan_2.1_vae.safetensors
// store it (encoder.downsamples, decoder.upsamples, middle, head) decodes
// the golden case bit for bit as the diffusers-layout VAE does.
func TestOriginalLayoutVAE(t *testing.T) {
	dst := t.TempDir()
	layoutFolder(t, dst, []string{VAE}, func(src, dst string) { wantest.WriteComponent(t, src, dst, wantest.OriginalVAEName, nil) })
	mustHold(t, filepath.Join(dst, VAE), "decoder.upsamples.0.residual.0.gamma")
	want := runMoE(t, "", nil, moeRequest(t))
	got := runMoE(t, dst, nil, moeRequest(t))
	if !slices.Equal(got.Video, want.Video) {
		t.Fatal("the original-layout VAE's video differs from the diffusers-layout VAE's")
	}
}

// A folder holding the Wan repositories' own files as they ship them,
// PyTorch zip checkpoints in their own layouts (the text encoder as
// models_t5_umt5-xxl-enc-bf16.pth in wan/modules/t5.py's names, the VAE as
// Wan2.1_VAE.pth), generates the golden case bit for bit as the
// diffusers folder does.
func TestTorchCheckpoints(t *testing.T) {
	dst := t.TempDir()
	layoutFolder(t, dst, []string{TextEncoder, VAE}, func(src, dst string) { writeTorch(t, src, dst) })
	mustHold(t, filepath.Join(dst, TextEncoder), "token_embedding.weight", "blocks.0.ffn.gate.0.weight", "norm.weight")
	mustHold(t, filepath.Join(dst, VAE), "decoder.upsamples.0.residual.0.gamma")
	want := runMoE(t, "", nil, moeRequest(t))
	got := runMoE(t, dst, nil, moeRequest(t))
	if !slices.Equal(got.Video, want.Video) {
		t.Fatal("the .pth folder's video differs from the diffusers folder's")
	}
}

// writeTorch writes a Wan 2.1 component as the Wan repositories ship it:
// a .pth file in their names.
func writeTorch(t *testing.T, src, dst string) {
	t.Helper()
	switch filepath.Base(src) {
	case ImageEncoder:
		wantest.WriteOriginalCLIP(t, src, dst, "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
	case TextEncoder:
		wantest.WriteTorchComponent(t, src, dst, "models_t5_umt5-xxl-enc-bf16.pth", wantest.OriginalT5Name)
	case VAE:
		wantest.WriteTorchComponent(t, src, dst, "Wan2.1_VAE.pth", wantest.OriginalVAEName)
	default:
		t.Fatalf("no .pth form of %s", src)
	}
}

// caseFolder copies case c's folder into a temporary directory (its
// inputs linked, its pipeline folder laid out with comps rewritten by
// write) and returns the copy.
func caseFolder(t *testing.T, c wan22Case, comps []string, write func(src, dst string)) string {
	t.Helper()
	dst := t.TempDir()
	src, _ := filepath.Abs(c.dir)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "pipeline" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dst, "pipeline"), 0o755); err != nil {
		t.Fatal(err)
	}
	layoutFolderOf(t, filepath.Join(src, "pipeline"), filepath.Join(dst, "pipeline"), comps, write)
	return dst
}

// The Wan 2.1 I2V golden folder with its image encoder as the Wan
// repositories ship it (models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth:
// the whole CLIP in wan/modules/clip.py's names, q, k and v fused) and its
// text encoder and VAE as their .pth files embeds the image and generates
// the video bit for bit as the diffusers folder does.
func TestTorchCheckpointsImageToVideo(t *testing.T) {
	c := wan22Cases()[2]
	dst := caseFolder(t, c, []string{ImageEncoder, TextEncoder, VAE}, func(src, dst string) { writeTorch(t, src, dst) })
	mustHold(t, filepath.Join(dst, "pipeline", ImageEncoder), "visual.transformer.0.attn.to_qkv.weight", "visual.cls_embedding", "textual.token_embedding.weight")
	want := c.generate(t, nil)
	c.dir = dst
	got := c.generate(t, nil)
	if !slices.Equal(got.ImageEmbeds, want.ImageEmbeds) || !slices.Equal(got.Video, want.Video) {
		t.Fatal("the .pth folder's image embeddings or video differ from the diffusers folder's")
	}
}

// A Wan 2.2 VAE stored as Wan2.2_VAE.pth and ComfyUI's
// wan2.2_vae.safetensors store it (each level's layers nested:
// encoder.downsamples.L.downsamples.N) decodes the TI2V golden case bit
// for bit as the diffusers-layout VAE does.
func TestOriginalLayoutVAE22(t *testing.T) {
	c := wan22Cases()[0]
	// The golden VAE has one residual block a level (num_res_blocks).
	original := wantest.OriginalVAE22Name(1)
	dst := caseFolder(t, c, []string{VAE}, func(src, dst string) { wantest.WriteComponent(t, src, dst, original, nil) })
	mustHold(t, filepath.Join(dst, "pipeline", VAE), "decoder.upsamples.0.upsamples.0.residual.0.gamma")
	want := c.generate(t, nil)
	c.dir = dst
	got := c.generate(t, nil)
	if !slices.Equal(got.Video, want.Video) {
		t.Fatal("the original-layout Wan 2.2 VAE's video differs from the diffusers-layout VAE's")
	}
}
