package lora

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// part is which tensor of an adapter a key holds.
type part int

const (
	partA     part = iota // lora_A / lora_down: [rank, in]
	partB                 // lora_B / lora_up: [out, rank]
	partAlpha             // alpha: one value
	partBias              // lora_B.bias (PEFT's lora_bias): [out], scaled as the product is
	partDiffB             // diff_b: [out], a bias difference added as it is
	partDiff              // diff: a full weight difference (proj_out's only; see diffHead)
	numParts
)

func (p part) String() string {
	return [...]string{"lora_A (down)", "lora_B (up)", "alpha", "lora_B.bias", "diff_b", "diff"}[p]
}

// difference says the part is one of the differences (diff_b, diff) that
// ComfyUI-style files hold and diffusers drops where it maps no module.
func (p part) difference() bool { return p == partDiffB || p == partDiff }

// blockTails maps the name of a Linear inside transformer block i, after
// "blocks.i.", in diffusers' or the original Wan naming, to diffusers'.
// add_k_proj / add_v_proj exist only in image-to-video models.
var blockTails = map[string]string{
	"attn1.to_q": "attn1.to_q", "attn1.to_k": "attn1.to_k", "attn1.to_v": "attn1.to_v", "attn1.to_out.0": "attn1.to_out.0",
	"attn2.to_q": "attn2.to_q", "attn2.to_k": "attn2.to_k", "attn2.to_v": "attn2.to_v", "attn2.to_out.0": "attn2.to_out.0",
	"attn2.add_k_proj": "attn2.add_k_proj", "attn2.add_v_proj": "attn2.add_v_proj",
	"ffn.net.0.proj": "ffn.net.0.proj", "ffn.net.2": "ffn.net.2",

	"self_attn.q": "attn1.to_q", "self_attn.k": "attn1.to_k", "self_attn.v": "attn1.to_v", "self_attn.o": "attn1.to_out.0",
	"cross_attn.q": "attn2.to_q", "cross_attn.k": "attn2.to_k", "cross_attn.v": "attn2.to_v", "cross_attn.o": "attn2.to_out.0",
	"cross_attn.k_img": "attn2.add_k_proj", "cross_attn.v_img": "attn2.add_v_proj",
	"ffn.0": "ffn.net.0.proj", "ffn.2": "ffn.net.2",
}

// globalModules maps the Linears outside the blocks the same way (the
// image embedder's only in image-to-video models).
var globalModules = map[string]string{
	"condition_embedder.time_embedder.linear_1":       "condition_embedder.time_embedder.linear_1",
	"condition_embedder.time_embedder.linear_2":       "condition_embedder.time_embedder.linear_2",
	"condition_embedder.text_embedder.linear_1":       "condition_embedder.text_embedder.linear_1",
	"condition_embedder.text_embedder.linear_2":       "condition_embedder.text_embedder.linear_2",
	"condition_embedder.time_proj":                    "condition_embedder.time_proj",
	"proj_out":                                        "proj_out",
	"condition_embedder.image_embedder.ff.net.0.proj": "condition_embedder.image_embedder.ff.net.0.proj",
	"condition_embedder.image_embedder.ff.net.2":      "condition_embedder.image_embedder.ff.net.2",

	"time_embedding.0":  "condition_embedder.time_embedder.linear_1",
	"time_embedding.2":  "condition_embedder.time_embedder.linear_2",
	"text_embedding.0":  "condition_embedder.text_embedder.linear_1",
	"text_embedding.2":  "condition_embedder.text_embedder.linear_2",
	"time_projection.1": "condition_embedder.time_proj",
	"head.head":         "proj_out",
	"img_emb.proj.1":    "condition_embedder.image_embedder.ff.net.0.proj",
	"img_emb.proj.3":    "condition_embedder.image_embedder.ff.net.2",
}

// kohyaBlockTails and kohyaGlobals are the same names with every dot an
// underscore, as kohya's "lora_unet_" names spell them (no two collide).
var kohyaBlockTails, kohyaGlobals = underscored(blockTails), underscored(globalModules)

func underscored(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ReplaceAll(k, ".", "_")] = v
	}
	return out
}

// prefixes that wrap module names in the files people share: PEFT's
// model wrapper, then the component (diffusers) or the original model's
// attribute (ComfyUI, musubi-tuner's "other" format).
var (
	wrapperPrefix = "base_model.model."
	modelPrefixes = []string{"transformer.", "diffusion_model.", "model.diffusion_model."}
)

const kohyaPrefix = "lora_unet_"

// errUnsupported marks keys of LoRA variants ferry cannot apply.
var errUnsupported = errors.New("not supported")

// errSkipped marks keys diffusers' loader drops without applying them
// (_convert_non_diffusers_wan_lora_to_diffusers): differences of norm
// layers and of modules it does not map, and full weight differences
// (.diff) of any Linear but the head.
var errSkipped = errors.New("skipped")

// parseKey maps a tensor name of any supported naming to the diffusers
// module it adapts and the part it holds.
func parseKey(name string) (module string, p part, err error) {
	if rest, ok := strings.CutPrefix(name, kohyaPrefix); ok {
		return parseKohya(rest)
	}
	n := strings.TrimPrefix(name, wrapperPrefix)
	for _, pre := range modelPrefixes {
		if rest, ok := strings.CutPrefix(n, pre); ok {
			n = rest
			break
		}
	}
	mod, p, err := splitSuffix(n)
	if err == nil {
		err = skippedNorm(mod, p)
	}
	if err != nil {
		return "", 0, err
	}
	module, err = canonical(mod)
	if err != nil && p.difference() {
		return "", 0, unmapped(mod)
	}
	if err == nil {
		err = skippedDiff(module, p)
	}
	return module, p, err
}

// skippedNorm and skippedDiff are the keys diffusers drops: a norm layer's
// differences (its Linear-less modules hold nothing ferry could adapt) and
// a full weight difference of a Linear but the head.
func skippedNorm(mod string, p part) error {
	if p.difference() && strings.Contains(mod, "norm") {
		return fmt.Errorf("a norm layer's difference: %w", errSkipped)
	}
	return nil
}

func skippedDiff(module string, p part) error {
	if p == partDiff && module != diffHead {
		return fmt.Errorf("a full weight difference of %s: %w", module, errSkipped)
	}
	return nil
}

// unmapped skips a difference of a module that is no Linear (the patch
// embedding's), which diffusers leaves unapplied.
func unmapped(mod string) error { return fmt.Errorf("a difference of %q: %w", mod, errSkipped) }

// diffHead is the one Linear whose full weight difference (head.head.diff,
// as the lightx2v distillation LoRAs store it) diffusers applies: as a
// lora_A beside an identity lora_B.
const diffHead = "proj_out"

// splitSuffix splits "<module>.<suffix>" where the suffix names the part:
// lora_A[.adapter].weight, lora_down.weight, lora_B[.adapter].weight,
// lora_up.weight, alpha, lora_B.bias, diff_b or diff.
func splitSuffix(n string) (string, part, error) {
	for _, s := range []struct {
		suffix string
		p      part
	}{{".lora_down.weight", partA}, {".lora_up.weight", partB}, {".alpha", partAlpha},
		{".lora_B.bias", partBias}, {".diff_b", partDiffB}, {".diff", partDiff}} {
		if mod, ok := strings.CutSuffix(n, s.suffix); ok {
			return mod, s.p, nil
		}
	}
	for _, s := range []struct {
		marker string
		p      part
	}{{".lora_A.", partA}, {".lora_B.", partB}} {
		i := strings.LastIndex(n, s.marker)
		if i < 0 {
			continue
		}
		rest := n[i+len(s.marker):]
		if adapter, ok := strings.CutSuffix(rest, "weight"); ok && adapterName(adapter) {
			return n[:i], s.p, nil
		}
	}
	for _, v := range []struct{ marker, what string }{
		{".dora_scale", "DoRA (dora_scale)"},
		{".lora_magnitude_vector", "DoRA (lora_magnitude_vector)"},
		{".hada_", "LoHa (hada_*)"},
		{".lokr_", "LoKr (lokr_*)"},
	} {
		if strings.Contains(n, v.marker) {
			return "", 0, fmt.Errorf("%s are %w", v.what, errUnsupported)
		}
	}
	return "", 0, errors.New("not a LoRA tensor name (want <module>.lora_A.weight, .lora_B.weight, .lora_down.weight, .lora_up.weight or .alpha)")
}

// adapterName reports whether s, what sits between lora_A. and weight, is
// nothing or one name and its dot (PEFT's "default.").
func adapterName(s string) bool {
	name, ok := strings.CutSuffix(s, ".")
	return s == "" || ok && name != "" && !strings.Contains(name, ".")
}

// parseKohya parses what follows "lora_unet_": the module with its dots
// as underscores, one dot, then the part.
func parseKohya(rest string) (string, part, error) {
	lname, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return "", 0, errors.New("kohya name without a part (want lora_unet_<module>.lora_down.weight, .lora_up.weight or .alpha)")
	}
	var p part
	switch suffix {
	case "lora_down.weight", "lora_A.weight":
		p = partA
	case "lora_up.weight", "lora_B.weight":
		p = partB
	case "alpha":
		p = partAlpha
	case "lora_B.bias":
		p = partBias
	case "diff_b":
		p = partDiffB
	case "diff":
		p = partDiff
	default:
		if _, _, err := splitSuffix("m." + suffix); errors.Is(err, errUnsupported) {
			return "", 0, err
		}
		return "", 0, fmt.Errorf("unknown part %q (want lora_down.weight, lora_up.weight or alpha)", suffix)
	}
	if err := skippedNorm(lname, p); err != nil {
		return "", 0, err
	}
	if rest, ok := strings.CutPrefix(lname, "blocks_"); ok {
		b, tail, _ := strings.Cut(rest, "_")
		i, err := blockIndex(b)
		if t, known := kohyaBlockTails[tail]; err == nil && known {
			m := "blocks." + strconv.Itoa(i) + "." + t
			return m, p, skippedDiff(m, p)
		}
	} else if m, known := kohyaGlobals[lname]; known {
		return m, p, skippedDiff(m, p)
	}
	if p.difference() {
		return "", 0, unmapped(lname)
	}
	return "", 0, fmt.Errorf("unknown module %q: not a Linear of a Wan transformer", lname)
}

// canonical maps a dotted module name, diffusers' or the original Wan's,
// to diffusers'.
func canonical(mod string) (string, error) {
	if rest, ok := strings.CutPrefix(mod, "blocks."); ok {
		b, tail, _ := strings.Cut(rest, ".")
		i, err := blockIndex(b)
		if t, known := blockTails[tail]; err == nil && known {
			return "blocks." + strconv.Itoa(i) + "." + t, nil
		}
	} else if m, known := globalModules[mod]; known {
		return m, nil
	}
	return "", fmt.Errorf("unknown module %q: not a Linear of a Wan transformer", mod)
}

// blockIndex parses a block number: decimal digits, at most 4 of them.
func blockIndex(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad block number %q", s)
	}
	return strconv.Atoi(s)
}
