package lora

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// metadataKey is the safetensors metadata entry where diffusers keeps the
// PEFT LoraConfig of each component, as JSON. save_lora_weights prefixes
// each field with the component ("transformer.lora_alpha"); a model's own
// save_lora_adapter writes them bare ("lora_alpha").
const metadataKey = "lora_adapter_metadata"

// component is the pipeline component Wan LoRAs adapt.
const component = "transformer"

// peftDefaultAlpha is LoraConfig's lora_alpha when a config omits it.
const peftDefaultAlpha = 8

// alphaFunc gives a module's alpha from the file's metadata.
type alphaFunc func(module string, rank int) float32

// peftFields are the LoraConfig fields that decide the scale.
type peftFields struct {
	LoraAlpha    *float64           `json:"lora_alpha"`
	AlphaPattern map[string]float64 `json:"alpha_pattern"`
	UseRSLoRA    bool               `json:"use_rslora"`
	UseDoRA      bool               `json:"use_dora"`
}

// metadataAlpha reads diffusers' lora_adapter_metadata; nil when the file
// has none (alpha is then the rank). It follows PEFT: alpha_pattern
// entries are regular expressions matched against the end of the module
// name at a dot (the longest matching key wins here, where PEFT takes the
// first in file order), lora_alpha is 8 when the config omits it, and
// use_rslora scales by alpha/√rank instead of alpha/rank.
func metadataAlpha(meta map[string]string) (alphaFunc, error) {
	raw, ok := meta[metadataKey]
	if !ok {
		return nil, nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &all); err != nil {
		return nil, fmt.Errorf("metadata %s is not a JSON object: %v", metadataKey, err)
	}
	fields := componentFields(all)
	if len(fields) == 0 {
		return nil, nil
	}
	var cfg peftFields
	for _, name := range []string{"lora_alpha", "alpha_pattern", "use_rslora", "use_dora"} {
		v, ok := fields[name]
		if !ok || string(v) == "null" {
			continue
		}
		if err := json.Unmarshal(v, fieldPtr(&cfg, name)); err != nil {
			return nil, fmt.Errorf("metadata %s: %s: %v", metadataKey, name, err)
		}
	}
	if cfg.UseDoRA {
		return nil, fmt.Errorf("metadata %s: use_dora is set; DoRA adapters are not supported", metadataKey)
	}
	return cfg.alphaFunc()
}

// componentFields are the transformer's fields: the prefixed ones when the
// file has any, else the bare ones.
func componentFields(all map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range all {
		if f, ok := strings.CutPrefix(k, component+"."); ok {
			out[f] = v
		}
	}
	if len(out) > 0 {
		return out
	}
	for k, v := range all {
		if !strings.Contains(k, ".") {
			out[k] = v
		}
	}
	return out
}

func fieldPtr(c *peftFields, name string) any {
	switch name {
	case "lora_alpha":
		return &c.LoraAlpha
	case "alpha_pattern":
		return &c.AlphaPattern
	case "use_rslora":
		return &c.UseRSLoRA
	default:
		return &c.UseDoRA
	}
}

// alphaFunc compiles the alpha patterns.
func (c peftFields) alphaFunc() (alphaFunc, error) {
	base := float64(peftDefaultAlpha)
	if c.LoraAlpha != nil {
		base = *c.LoraAlpha
	}
	type pattern struct {
		key   string
		re    *regexp.Regexp
		alpha float64
	}
	var pats []pattern
	for k, v := range c.AlphaPattern {
		re, err := regexp.Compile(`^(?:.*\.)?(?:` + k + `)$`)
		if err != nil {
			return nil, fmt.Errorf("metadata %s: alpha_pattern key %q is not a regular expression", metadataKey, k)
		}
		pats = append(pats, pattern{k, re, v})
	}
	slices.SortFunc(pats, func(a, b pattern) int { return len(b.key) - len(a.key) })
	for _, v := range append([]float64{base}, mapValues(c.AlphaPattern)...) {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
			return nil, fmt.Errorf("metadata %s: alpha %g is not a usable number", metadataKey, v)
		}
	}
	rs := c.UseRSLoRA
	return func(module string, rank int) float32 {
		alpha := base
		for _, p := range pats {
			if p.re.MatchString(module) {
				alpha = p.alpha
				break
			}
		}
		if rs {
			// Alpha/Rank must equal alpha/√rank.
			alpha *= math.Sqrt(float64(rank))
		}
		return float32(alpha)
	}, nil
}

func mapValues(m map[string]float64) []float64 {
	var out []float64
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// adapterMetadata is the lora_adapter_metadata Write stores: the most
// common rank and alpha as r and lora_alpha, the others as rank_pattern
// and alpha_pattern by module name (as diffusers' get_peft_kwargs writes
// them), and every module in target_modules; prefixed with the component
// as save_lora_weights does, so that WanPipeline.load_lora_weights finds
// them.
func adapterMetadata(ads []Adapter) (string, error) {
	rank := mostCommon(ads, func(a Adapter) float64 { return float64(a.Rank) })
	alpha := mostCommon(ads, func(a Adapter) float64 { return float64(a.Alpha) })
	rankPattern, alphaPattern := map[string]int{}, map[string]float64{}
	targets := make([]string, 0, len(ads))
	for _, a := range ads {
		if float64(a.Rank) != rank {
			rankPattern[a.Module] = a.Rank
		}
		if float64(a.Alpha) != alpha {
			alphaPattern[a.Module] = float64(a.Alpha)
		}
		targets = append(targets, a.Module)
	}
	slices.Sort(targets)
	m := map[string]any{
		component + ".r":              int(rank),
		component + ".lora_alpha":     alpha,
		component + ".target_modules": targets,
		component + ".rank_pattern":   rankPattern,
		component + ".alpha_pattern":  alphaPattern,
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", metadataKey, err)
	}
	return string(b), nil
}

// mostCommon is the value of f shared by most adapters (ties: the first
// such value in ads).
func mostCommon(ads []Adapter, f func(Adapter) float64) float64 {
	count := map[float64]int{}
	best := f(ads[0])
	for _, a := range ads {
		v := f(a)
		count[v]++
		if count[v] > count[best] {
			best = v
		}
	}
	return best
}
