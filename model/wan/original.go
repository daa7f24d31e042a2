package wan

import (
	"strings"

	"ferry/checkpoint"
)

// Class is the diffusers class of the transformer's component.
const Class = "WanTransformer3DModel"

// The Wan repositories' own layout ("blocks.0.self_attn.q.weight",
// "head.head.weight", ...) is the one the official non-diffusers releases
// and the files ComfyUI users download (fp16, fp8_e4m3fn) are stored in,
// sometimes under "model.diffusion_model.". A transformer folder holding
// such a file opens with its names mapped to diffusers', as diffusers'
// single-file loader maps them.
func init() {
	checkpoint.RegisterNaming(Class, checkpoint.Naming{Detect: originalLayout,
		Rename: func(n string) (string, bool) { return DiffusersName(n), true }})
}

// originalPrefix wraps the names of ComfyUI's single-file checkpoints.
const originalPrefix = "model.diffusion_model."

// originalLayout says names are the Wan repositories' own: names only
// that layout has (diffusers' are attn1, proj_out, condition_embedder).
func originalLayout(names []string) bool {
	for _, n := range names {
		n = strings.TrimPrefix(n, originalPrefix)
		if strings.HasPrefix(n, "head.head.") || strings.HasPrefix(n, "time_embedding.") || strings.Contains(n, ".self_attn.") {
			return true
		}
	}
	return false
}

// renames are applied in order, each to every occurrence, as diffusers'
// convert_wan_transformer_to_diffusers does: the order matters (the
// attention's projections after its prefix, the head's modulation before
// the blocks', and the three steps that swap norm2 and norm3: the original
// model's cross-attention norm is norm3, diffusers' norm2).
var renames = [][2]string{
	{"time_embedding.0", "condition_embedder.time_embedder.linear_1"},
	{"time_embedding.2", "condition_embedder.time_embedder.linear_2"},
	{"text_embedding.0", "condition_embedder.text_embedder.linear_1"},
	{"text_embedding.2", "condition_embedder.text_embedder.linear_2"},
	{"time_projection.1", "condition_embedder.time_proj"},
	{"cross_attn", "attn2"},
	{"self_attn", "attn1"},
	{".o.", ".to_out.0."},
	{".q.", ".to_q."},
	{".k.", ".to_k."},
	{".v.", ".to_v."},
	{".k_img.", ".add_k_proj."},
	{".v_img.", ".add_v_proj."},
	{".norm_k_img.", ".norm_added_k."},
	{"head.modulation", "scale_shift_table"},
	{"head.head", "proj_out"},
	{"modulation", "scale_shift_table"},
	{"ffn.0", "ffn.net.0.proj"},
	{"ffn.2", "ffn.net.2"},
	{"norm2", "norm__swap"},
	{"norm3", "norm2"},
	{"norm__swap", "norm3"},
	{"img_emb.proj.0", "condition_embedder.image_embedder.norm1"},
	{"img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"},
	{"img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"},
	{"img_emb.proj.4", "condition_embedder.image_embedder.norm2"},
	{"img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"},
}

// DiffusersName maps a tensor name of the Wan repositories' layout to
// diffusers' (names already in diffusers' layout may not survive it:
// only call it on original names).
func DiffusersName(name string) string {
	n := strings.TrimPrefix(name, originalPrefix)
	for _, r := range renames {
		n = strings.ReplaceAll(n, r[0], r[1])
	}
	return n
}
