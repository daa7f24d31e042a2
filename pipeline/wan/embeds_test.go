package wan

import (
	"path/filepath"
	"strings"
	"testing"

	"ferry/hwprofile"
	"ferry/planner"
	"ferry/residency"
)

// TestPromptEmbeds: a request that brings its prompt embeddings (diffusers'
// prompt_embeds and negative_prompt_embeds, as a server's prompt cache
// gives them back) makes the same video bit for bit without running the
// text encoder: no text phase, and peaks exactly the planner's with
// PromptsEncoded, under a resident and a streamed plan (where they differ
// from the peaks with the text encoder run). One embedding given encodes
// the other alone; a wrong length is refused.
func TestPromptEmbeds(t *testing.T) {
	dir := filepath.Join("testdata/wan_pipeline", "pipeline")
	req := Request{Prompt: "a lighthouse", NegativePrompt: "blurry", Height: 32, Width: 48, Frames: 5, Steps: 2,
		Guidance: 5, MaxSeqLen: 512, Seed: 3}
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
		t.Run(string(pc.Placement), func(t *testing.T) {
			plan := residency.Uniform("p", pc, Components...)
			p := openPipeline(t, dir)
			first, err := p.Generate(registered(t, p, plan), req, false)
			if err != nil {
				t.Fatal(err)
			}
			if first.PromptEmbeds == nil || first.NegativePromptEmbeds == nil {
				t.Fatal("the output holds no prompt embeddings")
			}
			given := req
			given.PromptEmbeds, given.NegativePromptEmbeds = first.PromptEmbeds, first.NegativePromptEmbeds
			p2 := openPipeline(t, dir)
			rt := registered(t, p2, plan)
			again, err := p2.Generate(rt, given, false)
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(again.Video, first.Video) {
				t.Error("the video from the given embeddings differs from the encoded run's")
			}
			m := rt.Measure()
			if m.TextEncoderS != 0 {
				t.Errorf("the text phase ran (%.3g s) with both embeddings given", m.TextEncoderS)
			}
			pr := predictPeaks(t, prof, plan, req, p.PromptTokens(req))
			r := pr.Request
			r.PromptsEncoded = true
			enc, err := planner.Predict(prof, hwprofile.Default(), plan, r, planner.Budgets{})
			if err != nil {
				t.Fatal(err)
			}
			checkPeaks(t, enc, m)
			if enc.TextEncoderS != 0 {
				t.Errorf("predicted text encoder time %.3g s with the prompts encoded", enc.TextEncoderS)
			}
			if pc.Placement == residency.Resident && enc.PeakDeviceBytes >= pr.PeakDeviceBytes {
				t.Errorf("resident: the allocated peak %d is not below the %d with the text encoder loaded: the test cannot tell",
					enc.PeakDeviceBytes, pr.PeakDeviceBytes)
			}
		})
	}

	t.Run("one given", func(t *testing.T) {
		p := openPipeline(t, dir)
		first, err := p.Generate(registered(t, p, nil), req, false)
		if err != nil {
			t.Fatal(err)
		}
		given := req
		given.PromptEmbeds = first.PromptEmbeds
		out, err := p.Generate(registered(t, p, nil), given, false)
		if err != nil {
			t.Fatal(err)
		}
		if &out.PromptEmbeds[0] != &first.PromptEmbeds[0] {
			t.Error("the given prompt embeddings were not used as given")
		}
		// Encoded alone, the negative prompt runs as a batch of one on its
		// own tokens: the same values up to the kernels' rounding.
		maxDiff(t, "negative prompt embeddings", out.NegativePromptEmbeds, first.NegativePromptEmbeds, 1e-5)
	})

	t.Run("wrong length", func(t *testing.T) {
		p := openPipeline(t, dir)
		bad := req
		bad.NegativePromptEmbeds = make([]float32, 7)
		_, err := p.Generate(registered(t, p, nil), bad, false)
		if err == nil || !strings.Contains(err.Error(), "negative prompt embeddings hold 7 values") {
			t.Fatalf("got %v, want the length refused", err)
		}
	})
}
