package wan

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"ferry/hwprofile"
	"ferry/imageproc"
	"ferry/lora"
	"ferry/model/modeltest"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
)

// TestPeaksPredicted runs the real pipeline, text-to-video, Wan 2.1
// image-to-video (CLIP and the VAE encoder) and Wan 2.2 TI2V, under each
// placement and both CFG modes, and with the VAE tiled (the decode and the
// image encode tile by tile), and checks the planner's peaks against
// the measured ones exactly: the device's allocated and reserved bytes and
// the host's reserved bytes. The planner replays the allocations the
// model code makes, in its order, through the device's own allocator
// (package arena), so any difference is an allocation the replay misses.
// 17 frames make five latent frames: enough chunks for the VAE's replay
// to find their period.
func TestPeaksPredicted(t *testing.T) {
	for _, c := range []struct {
		dir, image string
		tile       int // a VAE tile the model takes (Wan 2.2: multiples of 16, tile and stride)
	}{
		// 72: its default stride (54 pixels) is no multiple of 8.
		{"testdata/wan_pipeline", "", 72},
		{"testdata/wan21_i2v_pipeline", "testdata/wan21_i2v_pipeline/image.png", 64},
		{"testdata/wan22_ti2v_i2v_pipeline", "testdata/wan22_ti2v_i2v_pipeline/image.png", 64},
	} {
		var img *imageproc.RGB
		if c.image != "" {
			var err error
			if img, err = imageproc.Load(c.image); err != nil {
				t.Fatal(err)
			}
		}
		req := Request{Prompt: "a lighthouse", Height: 128, Width: 192, Frames: 17, Steps: 2, Guidance: 5,
			MaxSeqLen: 512, Seed: 1, Image: img}
		prof, err := planner.ProfileFromFolder(filepath.Join(c.dir, "pipeline"))
		if err != nil {
			t.Fatal(err)
		}
		if img != nil {
			if err := prof.UseImage(); err != nil {
				t.Fatal(err)
			}
		}
		type run struct {
			pc   residency.ComponentPlan
			cfg  string
			tile int // VAE tile (pixels), 0: untiled
		}
		var runs []run
		for _, pc := range []residency.ComponentPlan{
			{Placement: residency.Resident},
			{Placement: residency.Stream, Prefetch: 1},
			{Placement: residency.Host},
			{Placement: residency.Onload},
		} {
			for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
				runs = append(runs, run{pc: pc, cfg: cfg})
			}
		}
		// Tiled: the decode, and the image-to-video encode, tile by tile.
		runs = append(runs, run{pc: residency.ComponentPlan{Placement: residency.Resident}, cfg: residency.CFGBatched, tile: c.tile},
			run{pc: residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, cfg: residency.CFGBatched, tile: c.tile})
		for _, r := range runs {
			name := fmt.Sprintf("%s/%s/%s/tile%d", filepath.Base(c.dir), r.pc.Placement, r.cfg, r.tile)
			t.Run(name, func(t *testing.T) {
				plan := residency.Uniform("p", r.pc, append(slices.Clone(Components), ImageEncoder)...)
				plan.Run.CFG, plan.Run.VAETile = r.cfg, r.tile
				m, prompt := measurePeaks(t, filepath.Join(c.dir, "pipeline"), plan, req)
				pred := predictPeaks(t, prof, plan, req, prompt)
				for _, x := range []struct {
					what                string
					predicted, measured int64
				}{
					{"device allocated", pred.PeakDeviceBytes, m.PeakDeviceBytes},
					{"device reserved", pred.PeakDeviceReservedBytes, m.PeakDeviceReservedBytes},
					{"host reserved", pred.PeakHostBytes, m.PeakHostBytes},
				} {
					if x.predicted != x.measured {
						t.Errorf("peak %s: predicted %d, measured %d (%+d)", x.what, x.predicted, x.measured, x.predicted-x.measured)
					}
				}
			})
		}
	}
}

// TestPeaksPredictedWithEmbeddings: prompt embeddings a request gives
// fold where their zero rows start, not where the prompt's tokens end,
// and the planner, told by PromptTokens, predicts the peaks exactly.
func TestPeaksPredictedWithEmbeddings(t *testing.T) {
	dir := "testdata/wan_pipeline/pipeline"
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := openPipeline(t, dir)
	const rows = 40
	embeds := modeltest.Randn(5, 512*p.TextDim())
	clear(embeds[rows*p.TextDim():])
	req := Request{Prompt: "a lighthouse", PromptEmbeds: embeds, Height: 128, Width: 192, Frames: 5, Steps: 1,
		Guidance: 5, MaxSeqLen: 512, Seed: 1}
	for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
		t.Run(cfg, func(t *testing.T) {
			plan := residency.Uniform("p", residency.ComponentPlan{Placement: residency.Resident}, Components...)
			plan.Run.CFG = cfg
			m, prompt := measurePeaks(t, dir, plan, req)
			if prompt != rows {
				t.Errorf("PromptTokens %d, want the embeddings' %d rows", prompt, rows)
			}
			pred := predictPeaks(t, prof, plan, req, prompt)
			if pred.PeakDeviceBytes != m.PeakDeviceBytes {
				t.Errorf("peak device allocated: predicted %d, measured %d", pred.PeakDeviceBytes, m.PeakDeviceBytes)
			}
		})
	}
}

// measurePeaks generates req from the folder dir under plan and returns
// the run's measured figures and the prompt's token count.
func measurePeaks(t *testing.T, dir string, plan *residency.Plan, req Request) (pipeline.Measured, int) {
	t.Helper()
	p := openPipeline(t, dir)
	rt := registered(t, p, plan)
	if _, err := p.Generate(rt, req, false); err != nil {
		t.Fatal(err)
	}
	return rt.Measure(), p.PromptTokens(req)
}

// registered is a runtime under plan (nil: resident) with p registered,
// closed when the test ends.
func registered(t *testing.T, p *Pipeline, plan *residency.Plan) *pipeline.Runtime {
	t.Helper()
	rt, err := pipeline.NewRuntime(pipeline.Budget{}, plan, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	if err := p.Register(rt.Exec); err != nil {
		t.Fatal(err)
	}
	return rt
}

// predictPeaks is the planner's prediction for req (prompt tokens long)
// under plan on prof, with the default hardware figures and no budgets.
func predictPeaks(t *testing.T, prof *planner.Profile, plan *residency.Plan, req Request, prompt int) planner.Prediction {
	t.Helper()
	pred, err := planner.Predict(prof, hwprofile.Default(), plan, planRequest(req, prompt), planner.Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	return pred
}

// checkPeaks fails t where the predicted device (allocated, reserved) and
// host peaks differ from the measured ones.
func checkPeaks(t *testing.T, pred planner.Prediction, m pipeline.Measured) {
	t.Helper()
	if pred.PeakDeviceBytes != m.PeakDeviceBytes || pred.PeakDeviceReservedBytes != m.PeakDeviceReservedBytes || pred.PeakHostBytes != m.PeakHostBytes {
		t.Errorf("peaks device allocated/reserved, host: predicted %d/%d/%d, measured %d/%d/%d",
			pred.PeakDeviceBytes, pred.PeakDeviceReservedBytes, pred.PeakHostBytes,
			m.PeakDeviceBytes, m.PeakDeviceReservedBytes, m.PeakHostBytes)
	}
}

// TestLoRAPeaksPredicted: LoRA adapters on Wan 2.1 I2V's Linears outside
// the blocks (the image embedder's feed-forward) and in them (the image
// attention's key projection, the FFN) make intermediates the planner
// replays; the peaks still match exactly. The embedder's adapters are made
// wide enough to set the peak.
func TestLoRAPeaksPredicted(t *testing.T) {
	dir := "testdata/wan21_i2v_pipeline"
	img, err := imageproc.Load(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	p := openPipeline(t, filepath.Join(dir, "pipeline"))
	_, shapes := p.transformer.Config().LinearShapes()
	var ads []lora.Adapter
	for i, m := range []string{"condition_embedder.image_embedder.ff.net.0.proj", "condition_embedder.image_embedder.ff.net.2",
		"blocks.0.attn2.add_k_proj", "blocks.0.ffn.net.0.proj"} {
		s, ok := shapes[m]
		if !ok {
			t.Fatalf("no Linear %s", m)
		}
		rank := 2
		if i < 2 {
			// Wide enough that the embedder's x·Aᵀ (rows × rank) sets the
			// peak: the replay must make it to match.
			rank = 1 << 14
		}
		ads = append(ads, lora.Adapter{Module: m, Rank: rank, In: s[1], Out: s[0], Alpha: float32(rank),
			A: modeltest.Randn(uint64(2*i), rank*s[1]), B: modeltest.Randn(uint64(2*i+1), s[0]*rank)})
	}
	// A bias beside a pair, and a bias alone (ComfyUI's diff_b): bytes in
	// the adapters' buffer, no intermediate.
	last := &ads[len(ads)-1]
	last.HasBias, last.Bias = true, modeltest.Randn(9, last.Out)
	v := shapes["blocks.0.attn2.to_v"]
	ads = append(ads, lora.Adapter{Module: "blocks.0.attn2.to_v", Out: v[0], HasBias: true, Bias: modeltest.Randn(10, v[0])})
	loras := []LoRA{{File: "test", Scale: 0.5, Adapters: ads}}
	req := Request{Prompt: "a lighthouse", Height: 64, Width: 96, Frames: 5, Steps: 2, Guidance: 5,
		MaxSeqLen: 512, Seed: 1, Image: img, LoRAs: loras}
	prof, err := planner.ProfileFromFolder(filepath.Join(dir, "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.UseImage(); err != nil {
		t.Fatal(err)
	}
	for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
		t.Run(string(pc.Placement), func(t *testing.T) {
			plan := residency.Uniform("p", pc, append(slices.Clone(Components), ImageEncoder)...)
			m, prompt := measurePeaks(t, filepath.Join(dir, "pipeline"), plan, req)
			checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
		})
	}
}

// TestPeaksPredictedShortText checks the planner against Wan 2.1
// image-to-video with text contexts other than 512 tokens, where the
// transformer re-splits [image; text] as diffusers' attention processor
// does: a cut counted from the end, and one that leaves the image
// attention nothing.
func TestPeaksPredictedShortText(t *testing.T) {
	dir := "testdata/wan21_i2v_pipeline"
	img, err := imageproc.Load(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	prof, err := planner.ProfileFromFolder(filepath.Join(dir, "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.UseImage(); err != nil {
		t.Fatal(err)
	}
	for _, seqLen := range []int{24, 300} {
		for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
			t.Run(fmt.Sprintf("%d/%s", seqLen, pc.Placement), func(t *testing.T) {
				req := Request{Prompt: "a lighthouse", Height: 32, Width: 48, Frames: 5, Steps: 1, Guidance: 5,
					MaxSeqLen: seqLen, Seed: 1, Image: img}
				plan := residency.Uniform("p", pc, append(slices.Clone(Components), ImageEncoder)...)
				m, prompt := measurePeaks(t, filepath.Join(dir, "pipeline"), plan, req)
				checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
			})
		}
	}
}
