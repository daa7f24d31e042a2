package wan

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
)

// originalName spells a diffusers transformer name as the Wan
// repositories do (the inverse of model/wan's mapping, written out
// separately), under ComfyUI's "model.diffusion_model." prefix.
func originalName(n string) string {
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
	n = regexp.MustCompile(`^(blocks\.\d+)\.norm2\.`).ReplaceAllString(n, "$1.norm3.")
	n = regexp.MustCompile(`^(blocks\.\d+)\.scale_shift_table$`).ReplaceAllString(n, "$1.modulation")
	if n == "scale_shift_table" {
		n = "head.modulation"
	}
	return "model.diffusion_model." + n
}

// writeOriginal writes component comp of folder src into dst/comp with
// its weights in the original layout.
func writeOriginal(t *testing.T, src, dst, comp string) {
	t.Helper()
	writeComponent(t, src, dst, comp, originalName, nil)
}

// writeComponent writes component comp of folder src into dst/comp, each
// tensor renamed by name and, when conv is set, replaced by what conv
// returns given its name in src (one tensor or several).
func writeComponent(t *testing.T, src, dst, comp string, name func(string) string, conv func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor) {
	t.Helper()
	s, err := checkpoint.OpenSet(filepath.Join(src, comp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []checkpoint.RawTensor
	for _, n := range s.Names() {
		info, _ := s.Lookup(n)
		data := make([]byte, info.Size)
		if err := s.ReadAt(info, data); err != nil {
			t.Fatal(err)
		}
		r := checkpoint.RawTensor{Name: name(n), DType: info.DType, Shape: info.Shape, Data: data}
		if conv == nil {
			out = append(out, r)
			continue
		}
		out = append(out, conv(n, r)...)
	}
	if err := os.MkdirAll(filepath.Join(dst, comp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteFile(filepath.Join(dst, comp, "diffusion_pytorch_model.safetensors"), out, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, comp, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, comp, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A folder whose experts are stored in the Wan repositories' own layout
// (as the official single-file releases and ComfyUI's files are) opens
// with its names mapped and generates the golden case bit for bit as the
// diffusers-layout folder does.
func TestOriginalLayoutTransformer(t *testing.T) {
	src, _ := filepath.Abs(filepath.Join(moeDir, "pipeline"))
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == Transformer || e.Name() == Transformer2 {
			writeOriginal(t, src, dst, e.Name())
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := checkpoint.OpenSet(filepath.Join(dst, Transformer))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(raw.Names(), "model.diffusion_model.blocks.0.self_attn.q.weight") || !slices.Contains(raw.Names(), "model.diffusion_model.blocks.0.norm3.weight") {
		t.Fatalf("the rewritten file is not in the original layout: %v", raw.Names()[:4])
	}
	raw.Close()

	want := runMoE(t, "", nil, moeRequest(t))
	got := runMoE(t, dst, nil, moeRequest(t))
	if !slices.Equal(got.Video, want.Video) {
		t.Fatal("the original-layout folder's video differs from the diffusers-layout folder's")
	}
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

// scaledFP8 quantizes a 2-D float32 weight to E4M3 with a per-tensor scale
// (its largest magnitude over E4M3's, 448), as ComfyUI's fp8_scaled files
// store it: the fp8 weight and NAME.scale_weight; with the patch
// embedding, the scaled_fp8 marker. The dequantized values (each code's
// value times the scale, in float32) go to deq under comp and the
// weight's diffusers name.
func scaledFP8(deq map[string][]float32, comp string) func(string, checkpoint.RawTensor) []checkpoint.RawTensor {
	return func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor {
		if from == "patch_embedding.weight" {
			return []checkpoint.RawTensor{r, {Name: "model.diffusion_model.scaled_fp8", DType: dtype.F8E4M3, Shape: []int{0}}}
		}
		if len(r.Shape) != 2 || r.DType != dtype.F32 || !strings.HasSuffix(r.Name, ".weight") {
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
		deq[comp+from] = d
		sc := make([]byte, 4)
		binary.LittleEndian.PutUint32(sc, math.Float32bits(scale))
		return []checkpoint.RawTensor{
			{Name: r.Name, DType: dtype.F8E4M3, Shape: r.Shape, Data: codes},
			{Name: strings.TrimSuffix(r.Name, "weight") + "scale_weight", DType: dtype.F32, Shape: []int{}, Data: sc},
		}
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
	src, _ := filepath.Abs(filepath.Join(moeDir, "pipeline"))
	fp8, deqDir := t.TempDir(), t.TempDir()
	deq := map[string][]float32{}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		if name != Transformer && name != Transformer2 {
			for _, d := range []string{fp8, deqDir} {
				if err := os.Symlink(filepath.Join(src, name), filepath.Join(d, name)); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		writeComponent(t, src, fp8, name, originalName, scaledFP8(deq, name+"/"))
		f := filepath.Join(fp8, name, "diffusion_pytorch_model.safetensors")
		s, err := checkpoint.OpenSet(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Scale("model.diffusion_model.blocks.0.self_attn.q.weight"); got == 1 {
			t.Fatal("the fp8 file has no scale for blocks.0.self_attn.q")
		}
		s.Close()
		writeComponent(t, src, deqDir, name, func(n string) string { return n }, func(from string, r checkpoint.RawTensor) []checkpoint.RawTensor {
			if d, ok := deq[name+"/"+from]; ok {
				r.Data = make([]byte, 4*len(d))
				for i, v := range d {
					binary.LittleEndian.PutUint32(r.Data[4*i:], math.Float32bits(v))
				}
			}
			return []checkpoint.RawTensor{r}
		})
	}
	if len(deq) == 0 {
		t.Fatal("no weight was quantized")
	}
	want := runMoE(t, deqDir, nil, moeRequest(t))
	got := runMoE(t, fp8, nil, moeRequest(t))
	var worst float64
	for i := range want.Video {
		worst = max(worst, math.Abs(float64(got.Video[i]-want.Video[i])))
	}
	// Pixels are in [0, 1]; float32 rounding of the products moves them by
	// about 1e-6 here. A scale left out or applied twice moves them by
	// whole percents.
	if worst > 1e-4 {
		t.Fatalf("the scaled fp8 folder's video differs from the dequantized one's by up to %g", worst)
	}
	t.Logf("largest pixel difference %g", worst)
}
