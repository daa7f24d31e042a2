package wan

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/imageproc"
	"ferry/model/modeltest"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/torchrng"
)

// TestNumVideos generates the golden request as the first of two videos
// (num_videos_per_prompt 2, the second from other latents), in both CFG
// modes: the first video's steps and pixels match diffusers' within the
// golden's tolerances, and each video is the one a request of its own
// latents alone gives (within float32 rounding of the batched GEMMs).
func TestNumVideos(t *testing.T) {
	want := tensors(t, filepath.Join(goldenDir, "outputs.safetensors"))
	one := goldenRequest(t)
	other := one
	other.Latents = modeltest.Randn(7, len(one.Latents))
	p := openPipeline(t, filepath.Join(goldenDir, "pipeline"))
	alone := generateOn(t, p, nil, pipeline.Options{}, other)
	for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
		t.Run(cfg, func(t *testing.T) {
			plan := residency.Uniform("p", residency.ComponentPlan{Placement: residency.Resident}, Components...)
			plan.Run.CFG = cfg
			r := one
			r.NumVideos = 2
			r.Latents = append(slices.Clone(one.Latents), other.Latents...)
			out := generateOn(t, p, plan, pipeline.Options{}, r)
			if out.Videos != 2 || len(out.Video) != 2*len(alone.Video) {
				t.Fatalf("%d videos of %d values, want 2 of %d", out.Videos, len(out.Video), len(alone.Video))
			}
			steps, n := want["step_latents"], len(one.Latents)
			for i, got := range out.StepLatents {
				maxDiff(t, fmt.Sprintf("video 0 step_latents[%d]", i), got[:n], steps[i*n:(i+1)*n], atolLatents)
				maxDiff(t, fmt.Sprintf("video 1 step_latents[%d]", i), got[n:], alone.StepLatents[i], 1e-5)
			}
			v := len(alone.Video)
			maxDiff(t, "video 0 video_np", out.Video[:v], want["video_np"], atolVideo)
			maxDiff(t, "video 1 video_np", out.Video[v:], alone.Video, 1e-5)
		})
	}
}

// TestNumVideosNoise: without latents, a batch's noise is one draw of
// the whole batch from the seed (diffusers' randn_tensor of [2, z, T, h,
// w]), so the first video is the single request's and the second is
// different.
func TestNumVideosNoise(t *testing.T) {
	p := openPipeline(t, filepath.Join(goldenDir, "pipeline"))
	r := goldenRequest(t)
	r.Latents, r.Seed, r.Steps = nil, 3, 1
	single := generateOn(t, p, nil, pipeline.Options{}, r)
	r.NumVideos = 2
	both := generateOn(t, p, nil, pipeline.Options{}, r)
	noise := make([]float32, 2*len(single.StepLatents[0]))
	torchrng.New(3).Randn(noise)
	n := len(single.StepLatents[0])
	if sameBits(noise[:n], noise[n:]) {
		t.Fatal("the seed drew the same noise twice")
	}
	v := len(single.Video)
	maxDiff(t, "video 0", both.Video[:v], single.Video, 1e-5)
	if sameBits(both.Video[:v], both.Video[v:]) {
		t.Error("the two videos are equal: the second did not get its own noise")
	}
}

// TestNumVideosConditioned: image to video (Wan 2.1 I2V, TI2V) and video
// to video with two videos: each video is conditioned as a request of
// its own would be (its own latents, the same image or video), which
// also pins TI2V's first frame and noises the video's latents in every
// video of the batch, not only the first.
func TestNumVideosConditioned(t *testing.T) {
	img := func(t *testing.T, path string) *imageproc.RGB {
		im, err := imageproc.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return im
	}
	for _, c := range []struct {
		name, dir string
		h, w      int
		edit      func(t *testing.T, r *Request)
	}{
		{"wan21-i2v", "testdata/wan21_i2v_pipeline", 32, 48, func(t *testing.T, r *Request) {
			r.Image = img(t, "testdata/wan21_i2v_pipeline/image.png")
		}},
		{"ti2v-i2v", "testdata/wan22_ti2v_i2v_pipeline", 64, 96, func(t *testing.T, r *Request) {
			r.Image = img(t, "testdata/wan22_ti2v_i2v_pipeline/image.png")
		}},
		{"v2v", "testdata/wan_pipeline", 32, 48, func(t *testing.T, r *Request) {
			frame := img(t, "testdata/wan21_i2v_pipeline/image.png")
			for range 5 {
				r.Video = append(r.Video, frame)
			}
			r.Strength = 0.7
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := openPipeline(t, filepath.Join(c.dir, "pipeline"))
			r := Request{Prompt: "a lighthouse", Height: c.h, Width: c.w, Frames: 5, Steps: 2, Guidance: 5, MaxSeqLen: 24}
			c.edit(t, &r)
			if err := p.SetImageMode(r.Image != nil); err != nil {
				t.Fatal(err)
			}
			if err := p.SetVideoMode(r.Video != nil); err != nil {
				t.Fatal(err)
			}
			if r.Video != nil {
				// Latents and a video do not go together: the seed's
				// noise, whose first slice is the single request's.
				r.Seed = 5
				alone := generateOn(t, p, nil, pipeline.Options{}, r).Video
				r.NumVideos = 2
				both := generateOn(t, p, nil, pipeline.Options{}, r).Video
				maxDiff(t, "video 0", both[:len(alone)], alone, 1e-5)
				return
			}
			per := 1
			for _, d := range p.latentShape(r) {
				per *= d
			}
			lat := modeltest.Randn(11, 2*per)
			var alone [][]float32
			for i := range 2 {
				s := r
				s.Latents = lat[i*per : (i+1)*per]
				alone = append(alone, generateOn(t, p, nil, pipeline.Options{}, s).Video)
			}
			r.NumVideos, r.Latents = 2, lat
			both := generateOn(t, p, nil, pipeline.Options{}, r).Video
			v := len(alone[0])
			for i := range 2 {
				maxDiff(t, fmt.Sprintf("video %d", i), both[i*v:(i+1)*v], alone[i], 1e-5)
			}
		})
	}
}

// TestNoiseVideoBatch: video to video noises the video's latents into
// every video of a batch, each with its own noise.
func TestNoiseVideoBatch(t *testing.T) {
	p := openPipeline(t, filepath.Join(goldenDir, "pipeline"))
	s, err := p.scheduler(0)
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Steps: 4, Strength: 0.5}
	if err := s.SetTimesteps(r.Steps); err != nil {
		t.Fatal(err)
	}
	video := modeltest.Randn(1, 48)
	noise := modeltest.Randn(2, 3*len(video))
	latents := slices.Clone(noise)
	first, err := noiseVideo(s, r, video, latents)
	if err != nil {
		t.Fatal(err)
	}
	alpha, sigma := s.NoiseScales(first)
	for i, got := range latents {
		want := float32(alpha*video[i%len(video)]) + float32(sigma*noise[i])
		if got != want {
			t.Fatalf("video %d value %d: %v, want %v", i/len(video), i%len(video), got, want)
		}
	}
}

// TestNumVideosPeaksPredicted: the planner, told the batch (two videos of
// one prompt), predicts a batched request's peaks exactly: the text
// encoded once, the transformer over both videos (four samples under
// batched CFG), the VAE decoding one after the other, whole or tiled. A
// long prompt on a one-frame
// video makes the text encoder's pass the peak, which a planner counting
// one encoding per video would overstate.
func TestNumVideosPeaksPredicted(t *testing.T) {
	dir := "testdata/wan_pipeline/pipeline"
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	video := Request{Prompt: "a lighthouse", Height: 64, Width: 96, Frames: 9, Steps: 2, Guidance: 5,
		MaxSeqLen: 512, Seed: 1, NumVideos: 2}
	text := video
	text.Prompt, text.Height, text.Width, text.Frames = strings.Repeat("a lighthouse on a cliff ", 60), 32, 48, 1
	four := video // the third video priced from the second, the last replayed
	four.NumVideos, four.Steps = 4, 1
	for _, req := range []Request{video, text, four} {
		for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
			for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
				for _, tile := range []int{0, 64} {
					if tile > 0 && (cfg != residency.CFGBatched || req.Frames == 1) {
						continue
					}
					name := fmt.Sprintf("%dx%dx%dx%d/%s/%s/tile%d", req.NumVideos, req.Width, req.Height, req.Frames, pc.Placement, cfg, tile)
					t.Run(name, func(t *testing.T) {
						plan := residency.Uniform("p", pc, Components...)
						plan.Run.CFG, plan.Run.VAETile = cfg, tile
						m, prompt := measurePeaks(t, dir, plan, req)
						checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
					})
				}
			}
		}
	}
}

func TestNumVideosChecked(t *testing.T) {
	ok := Request{Height: 32, Width: 48, Frames: 9, Steps: 1, MaxSeqLen: 8}
	for _, c := range []struct {
		name string
		edit func(r *Request)
	}{
		{"negative count", func(r *Request) { r.NumVideos = -1 }},
		{"too many", func(r *Request) { r.NumVideos = MaxVideos + 1 }},
		{"too many in all", func(r *Request) { r.Prompts, r.NumVideos = []string{"a", "b", "c"}, 22 }},
		{"negatives", func(r *Request) { r.Prompts, r.NegativePrompts = []string{"a", "b"}, []string{"x"} }},
		{"embeddings", func(r *Request) { r.Prompts, r.PromptEmbeds = []string{"a", "b"}, make([]float32, 8) }},
	} {
		r := ok
		c.edit(&r)
		if err := r.Check(); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	r := Request{}
	r.Defaults()
	if r.NumVideos != 1 {
		t.Errorf("NumVideos defaults to %d, want 1", r.NumVideos)
	}
}

// TestPromptList: a batch of prompts (diffusers' prompt as a list), each
// with NumVideos videos in order, and negative prompts shared or one per
// prompt: the golden prompt's video matches diffusers', and every other
// video is the one its prompt, negative prompt and latents give alone.
func TestPromptList(t *testing.T) {
	want := tensors(t, filepath.Join(goldenDir, "outputs.safetensors"))["video_np"]
	p := openPipeline(t, filepath.Join(goldenDir, "pipeline"))
	one := goldenRequest(t)
	per := len(one.Latents)
	lat := append(slices.Clone(one.Latents), modeltest.Randn(8, 3*per)...)
	const dog, dogNeg = "A dog runs on the beach at dawn, long shot", "dark"
	for _, c := range []struct {
		name      string
		negatives []string
		videos    int
	}{
		{"shared-negative", nil, 1},
		{"own-negatives", []string{goldenNegative, dogNeg}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := one
			r.Prompt, r.Prompts, r.NegativePrompts, r.NumVideos = "", []string{goldenPrompt, dog}, c.negatives, c.videos
			n := 2 * c.videos
			r.Latents = lat[:n*per]
			out := generateOn(t, p, nil, pipeline.Options{}, r)
			if out.Videos != n {
				t.Fatalf("%d videos, want %d", out.Videos, n)
			}
			v := len(out.Video) / n
			maxDiff(t, "video 0", out.Video[:v], want, atolVideo)
			for i := 1; i < n; i++ {
				s := one
				if i >= c.videos { // the dog's videos
					s.Prompt = dog
					if c.negatives != nil {
						s.NegativePrompt = dogNeg
					}
				}
				s.Latents = lat[i*per : (i+1)*per]
				alone := generateOn(t, p, nil, pipeline.Options{}, s).Video
				maxDiff(t, fmt.Sprintf("video %d", i), out.Video[i*v:(i+1)*v], alone, 1e-5)
			}
		})
	}
}

// TestPromptListPeaksPredicted: prompts of different lengths in one
// batch, each folding its own padding; the planner, told the prompt count
// and the longest prompt, predicts the peaks exactly.
func TestPromptListPeaksPredicted(t *testing.T) {
	dir := "testdata/wan_pipeline/pipeline"
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Prompts: []string{"a lighthouse", strings.Repeat("a lighthouse on a cliff ", 30)}, Height: 32, Width: 48,
		Frames: 5, Steps: 1, Guidance: 5, MaxSeqLen: 512, Seed: 1, NumVideos: 2}
	for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
		t.Run(cfg, func(t *testing.T) {
			plan := residency.Uniform("p", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, Components...)
			plan.Run.CFG = cfg
			m, prompt := measurePeaks(t, dir, plan, req)
			checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
		})
	}
}

// TestLatentsOut: diffusers' output_type="latent" returns the latents
// after the last step: the golden's last step latents, within its
// tolerance, with no video; and the planner, told the VAE does not run,
// predicts the peaks exactly.
func TestLatentsOut(t *testing.T) {
	want := tensors(t, filepath.Join(goldenDir, "outputs.safetensors"))["step_latents"]
	p := openPipeline(t, filepath.Join(goldenDir, "pipeline"))
	r := goldenRequest(t)
	r.LatentsOut = true
	out := generateOn(t, p, nil, pipeline.Options{}, r)
	if out.Video != nil {
		t.Errorf("a latent output decoded %d values", len(out.Video))
	}
	n := len(r.Latents)
	if !slices.Equal(out.LatentShape, []int{1, 16, 3, 4, 6}) {
		t.Errorf("latent shape %v, want [1 16 3 4 6]", out.LatentShape)
	}
	maxDiff(t, "latents", out.Latents, want[len(want)-n:], atolLatents)

	dir := "testdata/wan_pipeline/pipeline"
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Prompt: "a lighthouse", Height: 64, Width: 96, Frames: 9, Steps: 1, Guidance: 5, MaxSeqLen: 512, Seed: 1, LatentsOut: true}
	for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
		t.Run(string(pc.Placement), func(t *testing.T) {
			plan := residency.Uniform("p", pc, Components...)
			m, prompt := measurePeaks(t, dir, plan, req)
			pred := predictPeaks(t, prof, plan, req, prompt)
			checkPeaks(t, pred, m)
			if pred.VAES != 0 {
				t.Errorf("predicted %g s of VAE for a latent output", pred.VAES)
			}
		})
	}
}
