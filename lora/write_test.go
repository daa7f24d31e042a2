package lora

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/model/modeltest"
)

func adapter(module string, rank, in, out int, alpha float32, seed uint64) Adapter {
	return Adapter{Module: module, Rank: rank, In: in, Out: out, Alpha: alpha,
		A: modeltest.Randn(seed, rank*in), B: modeltest.Randn(seed+100, out*rank)}
}

// TestWriteReadRoundTrip: what Write saves, Read gives back exactly,
// including per-module ranks and alphas that differ from the common ones
// (restored through rank_pattern / alpha_pattern), and the file has the
// names and metadata diffusers' save_lora_weights writes.
func TestWriteReadRoundTrip(t *testing.T) {
	ads := []Adapter{
		adapter("blocks.1.attn1.to_q", 4, 6, 6, 8, 1),
		adapter("blocks.0.ffn.net.0.proj", 4, 6, 10, 8, 2),
		adapter("blocks.0.attn2.to_out.0", 2, 6, 6, 8, 3),
		adapter("proj_out", 4, 6, 4, 1.5, 4),
		adapter("blocks.11.attn1.to_q", 4, 6, 6, 16, 5),
	}
	path := filepath.Join(t.TempDir(), "out.safetensors")
	if err := Write(path, ads, map[string]string{"ferry_steps": "2"}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(ads)
	slices.SortFunc(want, func(a, b Adapter) int { return strings.Compare(a.Module, b.Module) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back differs:\n got %+v\nwant %+v", got, want)
	}

	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	for _, ti := range f.Tensors() {
		names = append(names, ti.Name)
		if ti.DType.String() != "F32" {
			t.Errorf("%s stored as %s, want F32", ti.Name, ti.DType)
		}
	}
	if names[0] != "transformer.blocks.0.attn2.to_out.0.lora_A.weight" || names[1] != "transformer.blocks.0.attn2.to_out.0.lora_B.weight" || len(names) != 10 {
		t.Errorf("tensor names %v", names)
	}
	md := f.Metadata()
	if md["format"] != "pt" || md["ferry_steps"] != "2" {
		t.Errorf("metadata %v", md)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(md[metadataKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	wantCfg := map[string]any{
		"transformer.r":          4.0,
		"transformer.lora_alpha": 8.0,
		"transformer.target_modules": []any{"blocks.0.attn2.to_out.0", "blocks.0.ffn.net.0.proj",
			"blocks.1.attn1.to_q", "blocks.11.attn1.to_q", "proj_out"},
		"transformer.rank_pattern":  map[string]any{"blocks.0.attn2.to_out.0": 2.0},
		"transformer.alpha_pattern": map[string]any{"proj_out": 1.5, "blocks.11.attn1.to_q": 16.0},
	}
	if !reflect.DeepEqual(cfg, wantCfg) {
		t.Errorf("%s = %v\nwant %v", metadataKey, cfg, wantCfg)
	}
}

func TestWriteRefuses(t *testing.T) {
	good := adapter("blocks.0.attn1.to_q", 2, 3, 4, 2, 1)
	short := good
	short.A = short.A[:5]
	noAlpha := good
	noAlpha.Alpha = 0
	original := good
	original.Module = "blocks.0.self_attn.q"
	for _, tc := range []struct {
		name string
		ads  []Adapter
		meta map[string]string
		want string
	}{
		{"none", nil, nil, "no adapters"},
		{"short A", []Adapter{short}, nil, "A holds 5 values"},
		{"no alpha", []Adapter{noAlpha}, nil, "alpha 0"},
		{"not a diffusers name", []Adapter{original}, nil, "not a diffusers Wan transformer Linear name"},
		{"twice", []Adapter{good, good}, nil, "two adapters"},
		{"reserved metadata", []Adapter{good}, map[string]string{metadataKey: "{}"}, "written by lora.Write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.safetensors")
			err := Write(path, tc.ads, tc.meta)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Write error %v, want one naming the file and saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused Write left %d files", len(entries))
			}
		})
	}
}

// TestWriteReplacesAtomically: writing over an existing file leaves the
// new content and no temporary file beside it.
func TestWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	os.WriteFile(path, []byte("old"), 0o644)
	a := adapter("blocks.0.attn1.to_q", 2, 3, 4, 2, 1)
	if err := Write(path, []Adapter{a}, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %d files after Write, want 1", len(entries))
	}
	if got, err := Read(path); err != nil || len(got) != 1 || !slices.Equal(got[0].B, a.B) {
		t.Errorf("Read after Write: %v, %v", got, err)
	}
}
