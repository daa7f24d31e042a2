package planner

import (
	"strings"
	"testing"
)

func TestVAEConvsMatchWanVAEBlocks(t *testing.T) {
	for _, name := range BuiltinNames() {
		p, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		comp := p.Component(VAE)
		have := map[string]bool{}
		for _, b := range comp.Blocks {
			have[b.Name] = true
		}
		used := map[string]bool{}
		for _, cv := range p.Coder.decoderConvs() {
			if !have[VAE+"."+cv.block] {
				t.Errorf("%s: the formula's block %s is not a wanvae block (have %v)", name, cv.block, comp.Blocks)
			}
			used[VAE+"."+cv.block] = true
		}
		for b := range have {
			if strings.HasPrefix(b, VAE+".encoder.") {
				continue // image-to-video's encode: TestEncodeScriptVisitsEncoderBlocks
			}
			if !used[b] {
				t.Errorf("%s: wanvae block %s gets no work from the formula", name, b)
			}
		}
	}
}

func TestVAEFormulaParamsMatchWanVAE(t *testing.T) {
	p, err := Builtin("wan2.1-t2v-1.3b")
	if err != nil {
		t.Fatal(err)
	}
	mine := ComponentFromParams(VAE, p.Component(VAE).Storage, p.Coder.DecoderParams())
	theirs := p.Component(VAE)
	for i, b := range theirs.Blocks {
		var got int64
		for _, m := range mine.Blocks {
			if m.Name == b.Name {
				got = m.Params()
			}
		}
		want := b.Params()
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("block %d %s: the formula counts %d parameters, wanvae %d", i, b.Name, got, want)
		}
	}
}
