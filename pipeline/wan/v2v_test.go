package wan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"ferry/imageproc"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/sampler"
	"ferry/torchrng"
)

// TestStartStep: get_timesteps' arithmetic, float products truncated as
// Python's int() truncates them.
func TestStartStep(t *testing.T) {
	for _, c := range []struct {
		n        int
		strength float64
		want     int
	}{{50, 0.8, 10}, {50, 1, 0}, {4, 0.5, 2}, {10, 0.3, 7}, {3, 0.7, 1}, {2, 0.3, 2}, {7, 0.999, 1}} {
		if got := startStep(c.n, c.strength); got != c.want {
			t.Errorf("startStep(%d, %g) = %d, want %d", c.n, c.strength, got, c.want)
		}
	}
}

// testVideo is f frames of w×h test images, each different.
func testVideo(t *testing.T, f, w, h int) []*imageproc.RGB {
	t.Helper()
	out := make([]*imageproc.RGB, f)
	for i := range out {
		pix := make([]uint8, 3*w*h)
		for j := range pix {
			pix[j] = uint8((j*7 + i*40) % 256)
		}
		img, err := imageproc.NewRGB(w, h, pix)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = img
	}
	return out
}

// v2vPipeline opens the text-to-video golden folder ready for video to
// video.
func v2vPipeline(t *testing.T) *Pipeline {
	t.Helper()
	p := openPipeline(t, "testdata/wan_pipeline/pipeline")
	if err := p.SetVideoMode(true); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVideoToVideo: the video's latents are the VAE's encode of its
// resized frames (the training path's EncodeVideo gives the same bits);
// the denoising starts from (1 − σ)·latents + σ·noise at step
// N − int(N·strength) and runs the rest; at strength 1 the run is the
// text-to-video run from those latents, bit for bit.
func TestVideoToVideo(t *testing.T) {
	p := v2vPipeline(t)
	req := Request{Prompt: "a cat walks", NegativePrompt: "blurry", Height: 32, Width: 48, Frames: 5, Steps: 4,
		Guidance: 5, MaxSeqLen: 512, Seed: 11, Video: testVideo(t, 5, 40, 30), Strength: 0.5}
	out := generateOn(t, p, nil, pipeline.Options{}, req)
	if len(out.StepLatents) != 2 || len(out.Video) != 5*32*48*3 {
		t.Fatalf("%d steps run, %d video values; want 2 of 4 steps (strength 0.5) and 5 frames", len(out.StepLatents), len(out.Video))
	}

	// The encode, against EncodeVideo's.
	rt := registered(t, p, nil)
	plane := 32 * 48
	pixels := make([]float32, 3*5*plane)
	for f, img := range req.Video {
		px, err := vaeImage(img, 48, 32)
		if err != nil {
			t.Fatal(err)
		}
		for ch := range 3 {
			copy(pixels[(ch*5+f)*plane:][:plane], px[ch*plane:])
		}
	}
	want, _, err := p.EncodeVideo(rt, pixels, 5, 32, 48)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(out.VideoLatents, want) {
		t.Fatal("the video's latents differ from EncodeVideo's")
	}

	// Strength 1: noised at step 0, then the whole loop.
	req.Strength = 1
	full := generateOn(t, p, nil, pipeline.Options{}, req)
	sched, err := p.scheduler(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.SetTimesteps(req.Steps); err != nil {
		t.Fatal(err)
	}
	sigma := sched.Sigmas()[0]
	start := make([]float32, len(want))
	torchrng.New(req.Seed).Randn(start)
	for i, v := range want {
		start[i] = float32((1-sigma)*v) + float32(sigma*start[i])
	}
	t2v := req
	t2v.Video, t2v.Latents = nil, start
	ref := generateOn(t, openPipeline(t, "testdata/wan_pipeline/pipeline"), nil, pipeline.Options{}, t2v)
	if len(full.StepLatents) != 4 || !sameBits(full.Video, ref.Video) {
		t.Errorf("strength 1: %d steps; the video equals the text-to-video run from the noised latents: %v",
			len(full.StepLatents), sameBits(full.Video, ref.Video))
	}
	if sameBits(full.Video, out.Video) {
		t.Error("strength 0.5 and 1 gave the same video")
	}
}

// TestDefaultsVideoFrames: through the Go API as through the CLI, a
// video-to-video request without frames takes the video's, down to the
// largest 4k+1, and a video longer than the frames asked for is cut to
// them, with a note; a shorter one is left for CheckVideo to refuse.
func TestDefaultsVideoFrames(t *testing.T) {
	tests := []struct {
		video, frames int
		want, kept    int
		note          bool
	}{
		{5, 0, 5, 5, false},
		{7, 0, 5, 5, true},
		{8, 0, 5, 5, true},
		{9, 0, 9, 9, false},
		{1, 0, 1, 1, false},
		{7, 5, 5, 5, true},
		{9, 6, 5, 5, true},
		{5, 9, 9, 5, false},
	}
	for _, tt := range tests {
		r := Request{Frames: tt.frames, Video: make([]*imageproc.RGB, tt.video)}
		notes := r.Defaults()
		if r.Frames != tt.want || len(r.Video) != tt.kept {
			t.Errorf("video %d, frames %d: got %d frames and %d video frames, want %d and %d", tt.video, tt.frames, r.Frames, len(r.Video), tt.want, tt.kept)
		}
		if (len(notes) > 0) != tt.note {
			t.Errorf("video %d, frames %d: notes %q, want a note: %v", tt.video, tt.frames, notes, tt.note)
		}
	}
}

// TestVideoLongerThanFrames: a 7-frame video given to Generate without
// frames makes the video its first 5 frames make, bit for bit (the VAE
// encodes 4k+1 frames; diffusers' encode leaves the rest unread).
func TestVideoLongerThanFrames(t *testing.T) {
	p := v2vPipeline(t)
	video := testVideo(t, 7, 40, 30)
	req := Request{Prompt: "a cat walks", Height: 32, Width: 48, Steps: 2, Guidance: 1, MaxSeqLen: 512, Seed: 3,
		Video: video, Strength: 1}
	long := generateOn(t, p, nil, pipeline.Options{}, req)
	req.Video, req.Frames = video[:5], 5
	short := generateOn(t, p, nil, pipeline.Options{}, req)
	if long.Frames != 5 || !sameBits(long.Video, short.Video) {
		t.Fatalf("a 7-frame video made %d frames, or not the video of its first 5", long.Frames)
	}
}

// TestCheckVideo: video to video refuses what the reference refuses, and
// what it cannot run, with a line that says why.
func TestCheckVideo(t *testing.T) {
	video := testVideo(t, 5, 16, 16)
	base := Request{Frames: 5, Steps: 4, Video: video, Strength: 0.5}
	unready := openPipeline(t, "testdata/wan_pipeline/pipeline")
	i2v := openPipeline(t, tinyI2V(t))
	for _, c := range []struct {
		name string
		p    *Pipeline
		edit func(*Request)
		want string
	}{
		{"ok", v2vPipeline(t), func(*Request) {}, ""},
		{"not ready", unready, func(*Request) {}, "SetVideoMode"},
		{"latents too", v2vPipeline(t), func(r *Request) { r.Latents = []float32{1} }, "give one"},
		{"strength 0", v2vPipeline(t), func(r *Request) { r.Strength = 0 }, "(0, 1]"},
		{"strength over 1", v2vPipeline(t), func(r *Request) { r.Strength = 1.5 }, "(0, 1]"},
		{"strength NaN", v2vPipeline(t), func(r *Request) { r.Strength = math.NaN() }, "(0, 1]"},
		{"no step", v2vPipeline(t), func(r *Request) { r.Strength = 0.2 }, "runs no step"},
		{"frames", v2vPipeline(t), func(r *Request) { r.Frames = 9 }, "5 frames"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.edit(&r)
			err := c.p.CheckVideo(r)
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	if err := i2v.SetVideoMode(true); err == nil {
		t.Error("an image-to-video folder took video mode")
	}
}

// TestVideoToVideoPeaksPredicted: with the VAE's encode of the video and
// the steps the strength runs, the planner's peaks equal the measured
// ones, resident and streamed, untiled and tiled, with the Wan 2.1 VAE
// and with TI2V-5B's (Wan 2.2) in its text-to-video mode.
func TestVideoToVideoPeaksPredicted(t *testing.T) {
	for _, dir := range []string{"testdata/wan_pipeline/pipeline", "testdata/wan22_ti2v_t2v_pipeline/pipeline"} {
		v2vPeaks(t, dir)
	}
}

// v2vPeaks is TestVideoToVideoPeaksPredicted on one folder.
func v2vPeaks(t *testing.T, dir string) {
	req := Request{Prompt: "a cat walks", Height: 64, Width: 96, Frames: 9, Steps: 4, Guidance: 5,
		MaxSeqLen: 512, Seed: 1, Video: testVideo(t, 9, 50, 40), Strength: 0.6}
	for _, run := range []struct {
		pc   residency.ComponentPlan
		tile int
	}{{residency.ComponentPlan{Placement: residency.Resident}, 0}, {residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, 0},
		{residency.ComponentPlan{Placement: residency.Resident}, 64}} {
		t.Run(fmt.Sprintf("%s/%s/tile%d", dir, run.pc.Placement, run.tile), func(t *testing.T) {
			plan := residency.Uniform("p", run.pc, slices.Clone(Components)...)
			plan.Run.VAETile = run.tile
			p := openPipeline(t, dir)
			if err := p.SetVideoMode(true); err != nil {
				t.Fatal(err)
			}
			rt := registered(t, p, plan)
			if _, err := p.Generate(rt, req, false); err != nil {
				t.Fatal(err)
			}
			m := rt.Measure()
			prof, err := planner.ProfileFromFolder(dir) // UseVideo changes it
			if err != nil {
				t.Fatal(err)
			}
			if err := prof.UseVideo(); err != nil {
				t.Fatal(err)
			}
			checkPeaks(t, predictPeaks(t, prof, plan, req, p.PromptTokens(req)), m)
		})
	}
}

// TestRepeatedTimestep: where the schedule holds the start step's
// timestep twice, index_for_timestep finds the second, and video to video
// refuses to start (the reference would start a step late and run past
// the schedule's end).
func TestRepeatedTimestep(t *testing.T) {
	s, err := sampler.NewFlowMatchEuler(sampler.DefaultFlowMatchEulerConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimestepsWith(0, sampler.ScheduleOptions{Sigmas: []float64{1, 0.5, 0.5, 0.25}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{0, 2, 2, 3} {
		if got := indexForTimestep(s, i); got != want {
			t.Errorf("step %d: index %d, want %d", i, got, want)
		}
	}
	r := Request{Steps: 4, Strength: 0.75} // starts at step 1
	if _, err := noiseVideo(s, r, make([]float32, 4), make([]float32, 4)); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("start at a repeated timestep: %v", err)
	}
}

// TestNoiseVideoVP: with a variance-preserving scheduler (UniPC without
// flow sigmas) the video's latents are noised as its add_noise does,
// alpha_t * x + sigma_t * noise with alpha_t = 1 / sqrt(sigma^2 + 1), not
// as flow matching's (1 - sigma) * x + sigma * noise.
func TestNoiseVideoVP(t *testing.T) {
	s, err := sampler.FromConfig([]byte(`{"_class_name": "UniPCMultistepScheduler", "final_sigmas_type": "sigma_min"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimesteps(10); err != nil {
		t.Fatal(err)
	}
	r := Request{Steps: 10, Strength: 0.5}
	video, noise := []float32{1, -2, 0.5}, []float32{0.25, 1, -1}
	latents := slices.Clone(noise)
	first, err := noiseVideo(s, r, video, latents)
	if err != nil {
		t.Fatal(err)
	}
	sigma := float64(s.Sigmas()[first])
	alpha := 1 / math.Sqrt(sigma*sigma+1)
	for i := range video {
		want := alpha*float64(video[i]) + sigma*alpha*float64(noise[i])
		if math.Abs(float64(latents[i])-want) > 1e-6 {
			t.Errorf("latent %d = %v, want %v (sigma %v)", i, latents[i], want, sigma)
		}
	}
}
