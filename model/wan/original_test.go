package wan

import (
	"slices"
	"strings"
	"testing"
)

// originalPairs are the Wan repositories' module names (wan/modules/model.py:
// WanModel, WanAttentionBlock, MLPProj, Head) beside diffusers' names for
// the same weights, written out by hand for block 7 and the global ones.
var originalPairs = [][2]string{
	{"patch_embedding.weight", "patch_embedding.weight"},
	{"patch_embedding.bias", "patch_embedding.bias"},
	{"text_embedding.0.weight", "condition_embedder.text_embedder.linear_1.weight"},
	{"text_embedding.2.bias", "condition_embedder.text_embedder.linear_2.bias"},
	{"time_embedding.0.weight", "condition_embedder.time_embedder.linear_1.weight"},
	{"time_embedding.2.bias", "condition_embedder.time_embedder.linear_2.bias"},
	{"time_projection.1.weight", "condition_embedder.time_proj.weight"},
	{"img_emb.proj.0.weight", "condition_embedder.image_embedder.norm1.weight"},
	{"img_emb.proj.1.bias", "condition_embedder.image_embedder.ff.net.0.proj.bias"},
	{"img_emb.proj.3.weight", "condition_embedder.image_embedder.ff.net.2.weight"},
	{"img_emb.proj.4.bias", "condition_embedder.image_embedder.norm2.bias"},
	{"img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"},
	{"blocks.7.self_attn.q.weight", "blocks.7.attn1.to_q.weight"},
	{"blocks.7.self_attn.k.bias", "blocks.7.attn1.to_k.bias"},
	{"blocks.7.self_attn.v.weight", "blocks.7.attn1.to_v.weight"},
	{"blocks.7.self_attn.o.weight", "blocks.7.attn1.to_out.0.weight"},
	{"blocks.7.self_attn.norm_q.weight", "blocks.7.attn1.norm_q.weight"},
	{"blocks.7.self_attn.norm_k.weight", "blocks.7.attn1.norm_k.weight"},
	{"blocks.7.cross_attn.q.weight", "blocks.7.attn2.to_q.weight"},
	{"blocks.7.cross_attn.k.weight", "blocks.7.attn2.to_k.weight"},
	{"blocks.7.cross_attn.v.bias", "blocks.7.attn2.to_v.bias"},
	{"blocks.7.cross_attn.o.bias", "blocks.7.attn2.to_out.0.bias"},
	{"blocks.7.cross_attn.norm_q.weight", "blocks.7.attn2.norm_q.weight"},
	{"blocks.7.cross_attn.norm_k.weight", "blocks.7.attn2.norm_k.weight"},
	{"blocks.7.cross_attn.k_img.weight", "blocks.7.attn2.add_k_proj.weight"},
	{"blocks.7.cross_attn.v_img.bias", "blocks.7.attn2.add_v_proj.bias"},
	{"blocks.7.cross_attn.norm_k_img.weight", "blocks.7.attn2.norm_added_k.weight"},
	{"blocks.7.norm3.weight", "blocks.7.norm2.weight"}, // the cross-attention's norm
	{"blocks.7.norm3.bias", "blocks.7.norm2.bias"},
	{"blocks.7.ffn.0.weight", "blocks.7.ffn.net.0.proj.weight"},
	{"blocks.7.ffn.2.bias", "blocks.7.ffn.net.2.bias"},
	{"blocks.7.modulation", "blocks.7.scale_shift_table"},
	{"head.modulation", "scale_shift_table"},
	{"head.head.weight", "proj_out.weight"},
	{"head.head.bias", "proj_out.bias"},
}

func TestDiffusersName(t *testing.T) {
	for _, p := range originalPairs {
		for _, name := range []string{p[0], originalPrefix + p[0]} {
			if got := DiffusersName(name); got != p[1] {
				t.Errorf("%s: got %q, want %q", name, got, p[1])
			}
		}
	}
}

// Every weight of an image-to-video config (the most names: image
// embedder, image attention, cross-attention norm, FLF2V's position
// embedding) has an original name in the table's patterns.
func TestOriginalNamesCoverParams(t *testing.T) {
	cfg := tinyConfig()
	cfg.CrossAttnNorm = true
	cfg.ImageDim, cfg.AddedKVProjDim, cfg.PosEmbedSeqLen = ptr(12), ptr(cfg.InnerDim()), ptr(6)
	want := map[string]bool{}
	for _, p := range originalPairs {
		want[strings.Replace(p[1], "blocks.7.", "blocks.0.", 1)] = true
	}
	for _, p := range cfg.Params() {
		if strings.HasPrefix(p.Name, "blocks.") && !strings.HasPrefix(p.Name, "blocks.0.") {
			continue
		}
		if !want[p.Name] && !want[strings.TrimSuffix(p.Name, ".bias")+".weight"] && !want[strings.TrimSuffix(p.Name, ".weight")+".bias"] {
			t.Errorf("%s: no original name in the table", p.Name)
		}
	}
}

func TestOriginalLayout(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  bool
	}{
		{[]string{"blocks.0.self_attn.q.weight"}, true},
		{[]string{originalPrefix + "head.head.weight"}, true},
		{[]string{"time_embedding.0.weight"}, true},
		{[]string{"blocks.0.attn1.to_q.weight", "proj_out.weight"}, false},
		{nil, false},
	} {
		if got := originalLayout(c.names); got != c.want {
			t.Errorf("%v: %v, want %v", c.names, got, c.want)
		}
	}
}

// Renaming never panics, and the original names of distinct weights stay
// distinct.
func FuzzDiffusersName(f *testing.F) {
	for _, p := range originalPairs {
		f.Add(p[0])
	}
	f.Add("norm__swap")
	f.Add(originalPrefix)
	f.Fuzz(func(t *testing.T, name string) {
		got := DiffusersName(name)
		if name == "" && got != "" {
			t.Fatalf("empty name became %q", got)
		}
	})
}

func TestOriginalNamesDistinct(t *testing.T) {
	var got []string
	for _, p := range originalPairs {
		n := DiffusersName(p[0])
		got = append(got, n)
	}
	slices.Sort(got)
	if len(slices.Compact(got)) != len(originalPairs) {
		t.Fatal("two original names map to one diffusers name")
	}
}
