// Package loratest makes LoRA files for tests: random adapters on the
// transformer of a model folder (a `ferry synth` one), as users' LoRAs
// target it.
package loratest

import (
	"os"
	"path/filepath"
	"testing"

	"ferry/lora"
	"ferry/model/modeltest"
	"ferry/model/wan"
)

// Adapters returns rank-2 adapters (alpha 2) with random A and B, picked by
// seed, on every default target of the transformer in the folder model.
func Adapters(t testing.TB, model string, seed uint64) []lora.Adapter {
	t.Helper()
	cfg, err := wan.ReadConfig(filepath.Join(model, "transformer"))
	if err != nil {
		t.Fatal(err)
	}
	names, shapes := cfg.LinearShapes()
	var ads []lora.Adapter
	for i, m := range lora.Targets(names, lora.DefaultTargets) {
		s := shapes[m]
		ads = append(ads, lora.Adapter{Module: m, Rank: 2, In: s[1], Out: s[0], Alpha: 2,
			A: modeltest.Randn(seed*7919+uint64(i), 2*s[1]), B: modeltest.Randn(seed*7919+uint64(1000+i), s[0]*2)})
	}
	return ads
}

// Write writes ads to path as a LoRA file, making its folder.
func Write(t testing.TB, path string, ads []lora.Adapter) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := lora.Write(path, ads, nil); err != nil {
		t.Fatal(err)
	}
}
