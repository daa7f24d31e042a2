package synth

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/catalog"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/synthetic"
	"ferry/tokenizer"
)

// TestWriteMatchesArch writes every small architecture and checks that the
// folder holds exactly the declared tensors, with their shapes and dtypes.
func TestWriteMatchesArch(t *testing.T) {
	for _, name := range []string{"synthetic", "wan-tiny"} {
		t.Run(name, func(t *testing.T) {
			arch, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "m")
			// Tiny shards so that the sharded layout is exercised too.
			opt := Options{Seed: 1, DType: dtype.BF16, ShardBytes: 1 << 20}
			if err := Write(dir, arch, opt); err != nil {
				t.Fatal(err)
			}
			f, err := checkpoint.OpenFolder(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Class != arch.Class {
				t.Errorf("class %q, want %q", f.Class, arch.Class)
			}
			for _, c := range arch.Components {
				comp, err := f.Component(c.Name)
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Params) == 0 {
					continue
				}
				set, err := comp.Weights()
				if err != nil {
					t.Fatal(err)
				}
				if set.Len() != len(c.Params) {
					t.Errorf("%s: %d tensors, want %d", c.Name, set.Len(), len(c.Params))
				}
				want := c.storage(opt)
				for _, p := range c.Params {
					info, ok := set.Lookup(p.Name)
					if !ok {
						t.Fatalf("%s: missing %s", c.Name, p.Name)
					}
					if !slices.Equal(info.Shape, p.Shape) || info.DType != want {
						t.Errorf("%s: %v %s, want %v %s", p.Name, info.Shape, info.DType, p.Shape, want)
					}
				}
			}
		})
	}
}

// TestDeterministic: the same seed writes the same bytes, another seed
// other bytes.
func TestDeterministic(t *testing.T) {
	cfg := synthetic.Default()
	cfg.Layers, cfg.Dim = 2, 64
	arch := Synthetic(cfg)
	read := func(seed uint64) []byte {
		dir := filepath.Join(t.TempDir(), "m")
		if err := Write(dir, arch, Options{Seed: seed, DType: dtype.BF16}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "transformer", "diffusion_pytorch_model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := read(1), read(1), read(2)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different weights")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same weights")
	}
}

func TestRefusesExistingFolder(t *testing.T) {
	arch, _ := Lookup("synthetic")
	dir := t.TempDir()
	err := Write(dir, arch, Options{})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err = %v, want already exists", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left %s behind", e.Name())
		}
	}
}

func TestUnknownArch(t *testing.T) {
	_, err := Lookup("sdxl")
	if err == nil || !strings.Contains(err.Error(), "wan-tiny") {
		t.Fatalf("err = %v, want a list of the known architectures", err)
	}
}

// TestTokenizerEncodesWords: the synthetic tokenizer loads and splits a
// prompt into word pieces ending in </s>.
func TestTokenizerEncodesWords(t *testing.T) {
	dir := t.TempDir()
	if err := writeTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pieces := tok.EncodePieces("A cat walks on the grass")
	want := []string{"▁A", "▁cat", "▁walks", "▁on", "▁the", "▁grass"}
	if !slices.Equal(pieces, want) {
		t.Errorf("pieces %q, want %q", pieces, want)
	}
	ids, mask := tok.EncodeForModel("a cat", 8)
	if len(ids) != 8 || ids[2] != tok.EOSID() || mask[2] != 1 || mask[3] != 0 {
		t.Errorf("ids %v mask %v", ids, mask)
	}
	if tok.VocabSize() > catalog.WanTiny().Text.VocabSize {
		t.Errorf("tokenizer has %d pieces, more than the tiny encoder's %d rows", tok.VocabSize(), catalog.WanTiny().Text.VocabSize)
	}
}

// TestTorchDTypeFollowsWeights: a transformers config names the dtype its
// weights were written in, whatever --dtype asked for (the planner reads
// the files first, but other tools read torch_dtype).
func TestTorchDTypeFollowsWeights(t *testing.T) {
	arch, err := Lookup("wan-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for dt, want := range map[dtype.DType]string{dtype.F32: "float32", dtype.BF16: "bfloat16", dtype.F16: "float16"} {
		dir := filepath.Join(t.TempDir(), "m")
		if err := Write(dir, arch, Options{Seed: 1, DType: dt}); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "text_encoder", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			TorchDType string `json:"torch_dtype"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.TorchDType != want {
			t.Errorf("--dtype %v: text encoder torch_dtype %q, want %q", dt, cfg.TorchDType, want)
		}
	}
}
