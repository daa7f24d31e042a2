package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/dtype"
)

// makePipeline builds a tiny diffusers folder in a temp dir: Wan's real
// model_index.json, configs, and small weights for the model components.
func makePipeline(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	index, err := os.ReadFile("testdata/wan_model_index.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"model_index.json":                  string(index),
		"scheduler/scheduler_config.json":   `{"_class_name":"UniPCMultistepScheduler","num_train_timesteps":1000,"flow_shift":3.0}`,
		"text_encoder/config.json":          `{"d_model":32,"num_layers":2,"vocab_size":384}`,
		"tokenizer/spiece.model":            "not really",
		"tokenizer/tokenizer_config.json":   `{"model_max_length":512}`,
		"tokenizer/special_tokens_map.json": `{}`,
		"transformer/config.json":           `{"_class_name":"WanTransformer3DModel","num_layers":2,"patch_size":[1,2,2]}`,
		"vae/config.json":                   `{"z_dim":16}`,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w := func(path, name string) {
		t.Helper()
		raw := []RawTensor{{Name: name, DType: dtype.BF16, Shape: []int{2, 2}, Data: make([]byte, 8)}}
		if err := WriteFile(filepath.Join(dir, path), raw, nil); err != nil {
			t.Fatal(err)
		}
	}
	w("transformer/diffusion_pytorch_model.safetensors", "blocks.0.weight")
	w("vae/diffusion_pytorch_model.safetensors", "decoder.conv_in.weight")
	// The text encoder is sharded, as transformers saves large models.
	w("text_encoder/model-00001-of-00002.safetensors", "shared.weight")
	w("text_encoder/model-00002-of-00002.safetensors", "encoder.final_layer_norm.weight")
	err = WriteIndex(filepath.Join(dir, "text_encoder/model.safetensors.index.json"), map[string]string{
		"shared.weight":                   "model-00001-of-00002.safetensors",
		"encoder.final_layer_norm.weight": "model-00002-of-00002.safetensors",
	}, 16)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenFolder(t *testing.T) {
	dir := makePipeline(t)
	f, err := OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Class != "WanPipeline" {
		t.Errorf("Class = %q", f.Class)
	}
	if f.Meta["_diffusers_version"] != "0.40.0" {
		t.Errorf("Meta = %v", f.Meta)
	}
	if v, ok := f.Config["boundary_ratio"]; !ok || v != nil {
		t.Errorf("Config[boundary_ratio] = %v, %v; want nil, true", v, ok)
	}
	if f.Config["expand_timesteps"] != false {
		t.Errorf("Config[expand_timesteps] = %v", f.Config["expand_timesteps"])
	}
	if got := strings.Join(f.Names(), ","); got != "scheduler,text_encoder,tokenizer,transformer,vae" {
		t.Errorf("components %s", got)
	}
	if len(f.Absent) != 1 || f.Absent[0] != "transformer_2" {
		t.Errorf("Absent = %v", f.Absent)
	}
	te, err := f.Component("text_encoder")
	if err != nil {
		t.Fatal(err)
	}
	if te.Library != "transformers" || te.Class != "UMT5EncoderModel" || te.Dir != filepath.Join(dir, "text_encoder") {
		t.Errorf("text_encoder = %+v", te)
	}
	var cfg struct {
		DModel    int `json:"d_model"`
		NumLayers int `json:"num_layers"`
	}
	if err := te.Config(&cfg); err != nil || cfg.DModel != 32 || cfg.NumLayers != 2 {
		t.Errorf("Config = %+v, %v", cfg, err)
	}
	ws, err := te.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := te.Weights(); again != ws {
		t.Error("Weights opened the set twice")
	}
	if len(ws.Files()) != 2 || ws.Len() != 2 {
		t.Errorf("text encoder weights: %d files, %d tensors", len(ws.Files()), ws.Len())
	}
	sched, _ := f.Component("scheduler")
	raw, err := sched.RawConfig()
	if err != nil || raw["flow_shift"] != 3.0 {
		t.Errorf("scheduler config = %v, %v", raw, err)
	}
	if _, err := sched.Weights(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "scheduler") {
		t.Errorf("scheduler Weights() error = %v, want not-exist naming the component", err)
	}
	tok, _ := f.Component("tokenizer")
	if raw, err := tok.RawConfig(); err != nil || raw["model_max_length"] != 512.0 {
		t.Errorf("tokenizer config = %v, %v", raw, err)
	}
	tr, _ := f.Component("transformer")
	trw, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := trw.Lookup("blocks.0.weight"); !ok {
		t.Error("transformer weights lack blocks.0.weight")
	}
}

func TestFolderComponentErrors(t *testing.T) {
	f, err := OpenFolder(makePipeline(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"transformer_2": "absent", "unet": "no component"} {
		c, err := f.Component(name)
		if c != nil || err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("Component(%q) = %v, %v; want an error mentioning %q", name, c, err, want)
		}
	}
}

func TestComponentConfigErrors(t *testing.T) {
	cases := []struct {
		name     string
		content  *string // nil: no config.json
		want     string
		notExist bool
	}{
		{"missing", nil, "no config file", true},
		{"not json", ptr(`{"d_model": 32,,}`), "not valid JSON", false},
		{"duplicate key", ptr(`{"a":1,"a":2}`), "duplicate key", false},
		{"wrong type", ptr(`{"d_model":"big"}`), "does not decode", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makePipeline(t)
			path := filepath.Join(dir, "transformer", "config.json")
			os.Remove(path)
			if c.content != nil {
				os.WriteFile(path, []byte(*c.content), 0o644)
			}
			f, err := OpenFolder(dir)
			if err != nil {
				t.Fatal(err) // configs are read lazily: the folder still opens
			}
			comp, _ := f.Component("transformer")
			var cfg struct {
				DModel int `json:"d_model"`
			}
			err = comp.Config(&cfg)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Config() = %v; want an error naming %s and %q", err, path, c.want)
			}
			if errors.Is(err, fs.ErrNotExist) != c.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", !c.notExist, c.notExist)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestOpenFolderErrors(t *testing.T) {
	cases := []struct {
		name  string
		index *string // nil: no model_index.json
		want  string
	}{
		{"missing index", nil, "model_index.json"},
		{"not json", ptr(`{"_class_name":`), "not valid JSON"},
		{"array", ptr(`[]`), "not a JSON object"},
		{"no class", ptr(`{"vae":["diffusers","AutoencoderKLWan"]}`), "_class_name"},
		{"class not string", ptr(`{"_class_name":3}`), "_class_name"},
		{"half null", ptr(`{"_class_name":"P","vae":["diffusers",null]}`), "malformed"},
		{"missing folder", ptr(`{"_class_name":"P","unet":["diffusers","UNet2DConditionModel"]}`), "missing"},
		{"escaping name", ptr(`{"_class_name":"P","..":["diffusers","X"]}`), "not a folder name"},
		{"duplicate component", ptr(`{"_class_name":"P","vae":["diffusers","A"],"vae":["diffusers","B"]}`), "duplicate key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makePipeline(t)
			path := filepath.Join(dir, ModelIndexName)
			os.Remove(path)
			if c.index != nil {
				os.WriteFile(path, []byte(*c.index), 0o644)
			}
			f, err := OpenFolder(dir)
			if err == nil {
				t.Fatalf("OpenFolder succeeded: %+v", f)
			}
			if f != nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not name %s and %q", err, path, c.want)
			}
		})
	}
}
