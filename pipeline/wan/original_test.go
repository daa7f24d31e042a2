package wan

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
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
	s, err := checkpoint.OpenSet(filepath.Join(src, comp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []checkpoint.RawTensor
	for _, name := range s.Names() {
		info, _ := s.Lookup(name)
		data := make([]byte, info.Size)
		if err := s.ReadAt(info, data); err != nil {
			t.Fatal(err)
		}
		out = append(out, checkpoint.RawTensor{Name: originalName(name), DType: info.DType, Shape: info.Shape, Data: data})
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
