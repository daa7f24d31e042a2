package lora

import (
	"errors"
	"strings"
	"testing"

	"ferry/model/wan"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key, module string
		p           part
	}{
		// diffusers / PEFT
		{"blocks.0.attn1.to_q.lora_A.weight", "blocks.0.attn1.to_q", partA},
		{"transformer.blocks.12.attn2.to_out.0.lora_B.weight", "blocks.12.attn2.to_out.0", partB},
		{"base_model.model.blocks.3.ffn.net.0.proj.lora_A.weight", "blocks.3.ffn.net.0.proj", partA},
		{"transformer.blocks.3.ffn.net.2.lora_B.default.weight", "blocks.3.ffn.net.2", partB},
		{"transformer.proj_out.lora_A.weight", "proj_out", partA},
		{"condition_embedder.time_proj.lora_B.weight", "condition_embedder.time_proj", partB},
		{"transformer.blocks.1.attn1.to_k.alpha", "blocks.1.attn1.to_k", partAlpha},
		// original Wan names (ComfyUI, musubi-tuner "other")
		{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", "blocks.0.attn1.to_q", partA},
		{"diffusion_model.blocks.0.self_attn.o.lora_up.weight", "blocks.0.attn1.to_out.0", partB},
		{"diffusion_model.blocks.7.cross_attn.v.alpha", "blocks.7.attn2.to_v", partAlpha},
		{"diffusion_model.blocks.7.cross_attn.k_img.lora_A.weight", "blocks.7.attn2.add_k_proj", partA},
		{"diffusion_model.blocks.2.ffn.0.lora_A.weight", "blocks.2.ffn.net.0.proj", partA},
		{"diffusion_model.blocks.2.ffn.2.lora_B.weight", "blocks.2.ffn.net.2", partB},
		{"diffusion_model.head.head.lora_down.weight", "proj_out", partA},
		{"diffusion_model.text_embedding.0.lora_up.weight", "condition_embedder.text_embedder.linear_1", partB},
		{"diffusion_model.text_embedding.2.lora_up.weight", "condition_embedder.text_embedder.linear_2", partB},
		{"diffusion_model.time_embedding.0.alpha", "condition_embedder.time_embedder.linear_1", partAlpha},
		{"diffusion_model.time_embedding.2.lora_down.weight", "condition_embedder.time_embedder.linear_2", partA},
		{"diffusion_model.time_projection.1.lora_down.weight", "condition_embedder.time_proj", partA},
		{"diffusion_model.blocks.05.self_attn.q.lora_down.weight", "blocks.5.attn1.to_q", partA},
		// kohya (musubi-tuner's default)
		{"lora_unet_blocks_0_self_attn_q.lora_down.weight", "blocks.0.attn1.to_q", partA},
		{"lora_unet_blocks_39_cross_attn_o.lora_up.weight", "blocks.39.attn2.to_out.0", partB},
		{"lora_unet_blocks_4_ffn_0.alpha", "blocks.4.ffn.net.0.proj", partAlpha},
		{"lora_unet_blocks_4_ffn_2.lora_down.weight", "blocks.4.ffn.net.2", partA},
		{"lora_unet_blocks_4_cross_attn_v_img.lora_down.weight", "blocks.4.attn2.add_v_proj", partA},
		{"lora_unet_blocks_4_attn1_to_out_0.lora_up.weight", "blocks.4.attn1.to_out.0", partB},
		{"lora_unet_head_head.lora_up.weight", "proj_out", partB},
		{"lora_unet_text_embedding_2.alpha", "condition_embedder.text_embedder.linear_2", partAlpha},
		{"lora_unet_time_projection_1.lora_down.weight", "condition_embedder.time_proj", partA},
		// biases and differences are parts of their module; the head's full
		// difference is kept
		{"blocks.0.attn1.to_q.lora_B.bias", "blocks.0.attn1.to_q", partBias},
		{"diffusion_model.blocks.0.self_attn.q.diff_b", "blocks.0.attn1.to_q", partDiffB},
		{"diffusion_model.time_projection.1.diff_b", "condition_embedder.time_proj", partDiffB},
		{"diffusion_model.head.head.diff", "proj_out", partDiff},
		{"lora_unet_blocks_2_ffn_0.diff_b", "blocks.2.ffn.net.0.proj", partDiffB},
	} {
		mod, p, err := parseKey(tc.key)
		if err != nil || mod != tc.module || p != tc.p {
			t.Errorf("parseKey(%q) = %q, %v, %v; want %q, %v", tc.key, mod, p, err, tc.module, tc.p)
		}
	}
}

func TestParseKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		key, want   string
		unsupported bool
	}{
		{"blocks.0.attn1.to_q.weight", "not a LoRA tensor name", false},
		{"blocks.0.attn1.to_x.lora_A.weight", "unknown module", false},
		{"blocks.x.attn1.to_q.lora_A.weight", "unknown module", false},
		{"blocks.99999.attn1.to_q.lora_A.weight", "unknown module", false},
		{"patch_embedding.lora_A.weight", "unknown module", false},
		{"unet.down_blocks.0.lora_A.weight", "unknown module", false},
		{"blocks.0.attn1.to_q.lora_A.a.b.weight", "not a LoRA tensor name", false},
		{"diffusion_model.blocks.0.self_attn.q.hada_w1_a", "LoHa", true},
		{"blocks.0.attn1.to_q.lora_magnitude_vector", "DoRA", true},
		{"lora_unet_blocks_0_self_attn_q.dora_scale", "DoRA", true},
		{"lora_unet_blocks_0_self_attn_q", "without a part", false},
		{"lora_unet_blocks_0_self_attn_x.lora_down.weight", "unknown module", false},
		{"lora_unet_blocks__self_attn_q.lora_down.weight", "unknown module", false},
		{"lora_unet_down_blocks_0.lora_down.weight", "unknown module", false},
		{"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", "unknown module", false},
		{"", "not a LoRA tensor name", false},
	} {
		_, _, err := parseKey(tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, errUnsupported) != tc.unsupported {
			t.Errorf("parseKey(%q) error %v, want one saying %q (unsupported %v)", tc.key, err, tc.want, tc.unsupported)
		}
	}
}

// TestParseKeySkipsDroppedDifferences: what diffusers drops (norm
// differences, full differences of a Linear but the head) is skipped.
func TestParseKeySkipsDroppedDifferences(t *testing.T) {
	for _, key := range []string{
		"diffusion_model.blocks.0.norm3.diff", "diffusion_model.blocks.0.norm3.diff_b",
		"diffusion_model.blocks.0.self_attn.norm_q.diff", "diffusion_model.blocks.0.self_attn.q.diff",
		"diffusion_model.blocks.0.ffn.2.diff", "lora_unet_blocks_0_norm3.diff", "lora_unet_blocks_0_self_attn_q.diff",
		"diffusion_model.patch_embedding.diff", "diffusion_model.patch_embedding.diff_b",
	} {
		if _, _, err := parseKey(key); !errors.Is(err, errSkipped) {
			t.Errorf("parseKey(%q): %v, want it skipped", key, err)
		}
	}
}

// TestKohyaNamesDoNotCollide: dots to underscores must keep the tables
// one to one, or a kohya name would be ambiguous.
func TestKohyaNamesDoNotCollide(t *testing.T) {
	if len(kohyaBlockTails) != len(blockTails) || len(kohyaGlobals) != len(globalModules) {
		t.Errorf("underscored tables have %d and %d names, the dotted %d and %d",
			len(kohyaBlockTails), len(kohyaGlobals), len(blockTails), len(globalModules))
	}
	// Every diffusers name maps to itself (Write's names read back).
	for _, tab := range []map[string]string{blockTails, globalModules} {
		for _, v := range tab {
			if tab[v] != v {
				t.Errorf("%q maps to %q, want itself", v, tab[v])
			}
		}
	}
}

func TestTargets(t *testing.T) {
	names := []string{"blocks.0.attn1.to_q", "blocks.0.xattn1.to_q", "blocks.1.ffn.net.2", "proj_out", "blocks.0.attn1.to_q"}
	got := Targets(names, []string{"attn1.to_q", "ffn.net.2", "net.2"})
	want := []string{"blocks.0.attn1.to_q", "blocks.1.ffn.net.2"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Targets = %v, want %v", got, want)
	}
	if got := Targets(names, []string{"proj_out"}); len(got) != 1 || got[0] != "proj_out" {
		t.Errorf("Targets(proj_out) = %v", got)
	}
}

func TestCheck(t *testing.T) {
	shapes := map[string][2]int{"blocks.0.attn1.to_q": {48, 48}, "blocks.0.ffn.net.0.proj": {80, 48}}
	ok := []Adapter{{Module: "blocks.0.attn1.to_q", Out: 48, In: 48}, {Module: "blocks.0.ffn.net.0.proj", Out: 80, In: 48}}
	if err := Check(ok, shapes); err != nil {
		t.Errorf("Check: %v", err)
	}
	for _, tc := range []struct {
		a    Adapter
		want string
	}{
		{Adapter{Module: "blocks.5.attn1.to_q", Out: 48, In: 48}, "no such Linear"},
		{Adapter{Module: "blocks.0.ffn.net.0.proj", Out: 48, In: 80}, "80→48 features but the model's Linear is 48→80"},
	} {
		if err := Check([]Adapter{tc.a}, shapes); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%v) = %v, want %q", tc.a.Module, err, tc.want)
		}
	}
}

// The original Wan module names the tables accept map to the diffusers
// modules the transformer's own loader maps them to (model/wan's
// DiffusersName, which reads whole checkpoints in that layout): one
// mapping, written twice because kohya's names need every module spelled
// out (their underscores cannot be split back into dots).
func TestOriginalNamesAgreeWithWan(t *testing.T) {
	for _, tab := range []struct {
		names  map[string]string
		prefix string
	}{{blockTails, "blocks.3."}, {globalModules, ""}} {
		for from, to := range tab.names {
			if from == to {
				continue // diffusers' own name
			}
			got := wan.DiffusersName(tab.prefix + from + ".weight")
			if want := tab.prefix + to + ".weight"; got != want {
				t.Errorf("%s: the LoRA tables say %s, model/wan says %s", from, want, got)
			}
		}
	}
}
