package wan

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"ferry/imageproc"
	"ferry/pipeline"
	"ferry/residency"
)

// wan22Case is one of the Wan 2.2 / image-to-video golden cases
// (../shared/golden/manifest.json): its folder and call.
type wan22Case struct {
	dir      string
	req      Request
	image    bool // the case conditions on image.png
	embeds   bool // the case checks image_embeds (atol 1e-4)
	channels int  // the transformer's in_channels
}

func wan22Cases() []wan22Case {
	return []wan22Case{
		{dir: "testdata/wan22_ti2v_t2v_pipeline", channels: 12, req: Request{
			Prompt: "A paper boat drifting down a gutter in the rain", NegativePrompt: "low quality",
			Height: 64, Width: 96, Frames: 9, Steps: 3, Guidance: 5, MaxSeqLen: 24}},
		{dir: "testdata/wan22_ti2v_i2v_pipeline", image: true, channels: 12, req: Request{
			Prompt: "The boat turns slowly", Height: 64, Width: 96, Frames: 9, Steps: 3, Guidance: 4, MaxSeqLen: 24}},
		{dir: "testdata/wan21_i2v_pipeline", image: true, embeds: true, channels: 36, req: Request{
			Prompt: "A lighthouse at dusk, waves crashing", NegativePrompt: "static, blurry",
			Height: 32, Width: 48, Frames: 9, Steps: 3, Guidance: 5, MaxSeqLen: 512}},
	}
}

// request is the case's call with its latents and image.
func (c wan22Case) request(t *testing.T) Request {
	t.Helper()
	r := c.req
	r.Latents = tensors(t, filepath.Join(c.dir, "inputs.safetensors"))["latents"]
	if c.image {
		img, err := imageproc.Load(filepath.Join(c.dir, "image.png"))
		if err != nil {
			t.Fatal(err)
		}
		r.Image = img
	}
	return r
}

// generate runs the case under plan (nil: resident).
func (c wan22Case) generate(t *testing.T, plan *residency.Plan) *Output {
	t.Helper()
	p := openPipeline(t, filepath.Join(c.dir, "pipeline"))
	if got := p.transformer.Config().InChannels; got != c.channels {
		t.Fatalf("in_channels %d, want %d", got, c.channels)
	}
	return generateOn(t, p, plan, pipeline.Options{}, c.request(t))
}

// TestGoldenWan22 compares every step's latents, the video and (Wan 2.1
// I2V) the image embeddings with diffusers for the TI2V text-to-video,
// TI2V image-to-video and Wan 2.1 image-to-video cases, then checks that
// streaming the weights from host and from disk changes no bit.
func TestGoldenWan22(t *testing.T) {
	for _, c := range wan22Cases() {
		t.Run(filepath.Base(c.dir), func(t *testing.T) {
			want := tensors(t, filepath.Join(c.dir, "outputs.safetensors"))
			out := c.generate(t, nil)
			if c.embeds {
				maxDiff(t, "image_embeds", out.ImageEmbeds, want["image_embeds"], 1e-4)
			}
			steps := want["step_latents"]
			if len(out.StepLatents) != c.req.Steps {
				t.Fatalf("%d steps kept, want %d", len(out.StepLatents), c.req.Steps)
			}
			n := len(steps) / c.req.Steps
			for i, got := range out.StepLatents {
				maxDiff(t, "step_latents["+string(rune('0'+i))+"]", got, steps[i*n:(i+1)*n], atolLatents)
			}
			maxDiff(t, "video_np", out.Video, want["video_np"], atolVideo)
			for _, pc := range []residency.ComponentPlan{
				{Placement: residency.Stream, Prefetch: 1},
				{Placement: residency.Stream, Tier: residency.TierDisk},
			} {
				got := c.generate(t, residency.Uniform("stream", pc, append(slices.Clone(Components), ImageEncoder)...))
				for i := range out.Video {
					if math.Float32bits(got.Video[i]) != math.Float32bits(out.Video[i]) {
						t.Fatalf("%+v: video value %d is %v, resident %v", pc, i, got.Video[i], out.Video[i])
					}
				}
			}
		})
	}
}
