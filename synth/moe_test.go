package synth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/wan"
)

// TestWan22A14BArch: the A14B is Wan-AI/Wan2.2-T2V-A14B-Diffusers' layout:
// two transformers with Wan 2.1 14B's config, boundary_ratio 0.875 beside
// them, the experts float32 unless asked otherwise, the text encoder bf16.
func TestWan22A14BArch(t *testing.T) {
	a, err := Lookup("wan2.2-t2v-a14b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Settings["boundary_ratio"] != 0.875 || a.Settings["expand_timesteps"] != false {
		t.Errorf("settings %v, want boundary_ratio 0.875 and expand_timesteps false", a.Settings)
	}
	if a.DType != dtype.F32 {
		t.Errorf("default storage %v, want F32 (as the diffusers folders)", a.DType)
	}
	var names []string
	for _, c := range a.Components {
		names = append(names, c.Name)
		switch c.Name {
		case "transformer", "transformer_2":
			cfg, ok := c.Config.(wan.Config)
			if !ok || cfg.NumLayers != 40 || cfg.InnerDim() != 5120 || cfg.FFNDim != 13824 || cfg.InChannels != 16 || cfg.TextDim != 4096 {
				t.Errorf("%s config %+v, want Wan 14B's", c.Name, c.Config)
			}
			if c.DType != 0 {
				t.Errorf("%s storage pinned to %v; it must follow --dtype", c.Name, c.DType)
			}
		case "text_encoder":
			if c.DType != dtype.BF16 {
				t.Errorf("text encoder storage %v, want BF16 as published", c.DType)
			}
		}
	}
	want := []string{"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae"}
	if len(names) != len(want) {
		t.Fatalf("components %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("components %v, want %v", names, want)
		}
	}
	// Two fp32 experts are four times the 14B's bf16 transformer.
	t14, _ := Lookup("wan2.1-t2v-14b")
	if got, one := experts(a, Options{}), experts(t14, Options{DType: dtype.BF16}); got != 4*one {
		t.Errorf("experts %d bytes, want 4 x %d", got, one)
	}
}

func experts(a Arch, opt Options) int64 {
	var n int64
	for _, c := range a.Components {
		if c.Name == "transformer" || c.Name == "transformer_2" {
			n += TotalBytes(Arch{Components: []Component{c}}, opt)
		}
	}
	return n
}

// TestWriteTwoExperts writes the small two-expert model: model_index.json
// carries the boundary and both experts, in the architecture's dtype when
// no dtype is asked.
func TestWriteTwoExperts(t *testing.T) {
	a, err := Lookup("wan-tiny-moe")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := Write(dir, a, Options{Seed: 2}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, checkpoint.ModelIndexName))
	if err != nil {
		t.Fatal(err)
	}
	var index map[string]any
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if index["boundary_ratio"] != 0.875 {
		t.Errorf("boundary_ratio %v, want 0.875", index["boundary_ratio"])
	}
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var values [][]float32
	for _, name := range []string{"transformer", "transformer_2"} {
		c, err := f.Component(name)
		if err != nil {
			t.Fatal(err)
		}
		set, err := c.Weights()
		if err != nil {
			t.Fatal(err)
		}
		info, _ := set.Lookup("proj_out.weight")
		if info.DType != dtype.BF16 {
			t.Errorf("%s stored as %v, want the architecture's BF16", name, info.DType)
		}
		v, err := set.ReadF32(info)
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	if slices.Equal(values[0], values[1]) {
		t.Error("the two experts hold the same weights")
	}
}
