package wan

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"ferry/catalog"
	"ferry/imageproc"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
)

// tinyFLF2V is tinyI2V with Wan 2.1 FLF2V's image embedder: a position
// embedding over two images' CLIP tokens (pos_embed_seq_len 2 × 5).
func tinyFLF2V(t *testing.T) string {
	t.Helper()
	return tinyI2VWith(t, flf2v)
}

func flf2v(w *catalog.Wan) {
	w.Name = "wan-tiny-flf2v"
	pos := 2 * w.ImageEncoder.Tokens()
	w.Transformer.PosEmbedSeqLen = &pos
}

// wideFLF2V is tinyFLF2V with a CLIP tower of 257 tokens and a wide MLP,
// whose activations set the request's device peak.
func wideFLF2V(t *testing.T) string {
	t.Helper()
	return tinyI2VWith(t, func(w *catalog.Wan) {
		enc := *w.ImageEncoder
		enc.ImageSize, enc.IntermediateSize = 224, 4096
		w.ImageEncoder = &enc
		flf2v(w)
	})
}

// tinyI2VMoE is Wan 2.2 I2V A14B's layout at toy sizes: a
// WanImageToVideoPipeline without an image encoder, two experts taking
// the latents, the mask and the condition's latents.
func tinyI2VMoE(t *testing.T) string {
	t.Helper()
	w := catalog.WanTinyMoE()
	w.Name, w.ImageToVideo = "wan-tiny-i2v-moe", true
	w.Transformer.InChannels = 2*w.VAE.ZDim + 4
	return writeTiny(t, w)
}

// checkers is a second test image, unlike gradient's ramps.
func checkers(t *testing.T, w, h int) *imageproc.RGB {
	t.Helper()
	pix := make([]uint8, 3*w*h)
	for y := range h {
		for x := range w {
			v := uint8(40)
			if (x/4+y/4)%2 == 0 {
				v = 220
			}
			i := 3 * (y*w + x)
			pix[i], pix[i+1], pix[i+2] = v, 255-v, uint8(7*x)
		}
	}
	img, err := imageproc.NewRGB(w, h, pix)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// checkMask checks the s mask channels of a condition [s+z, T, h·w]
// (flattened): every channel of latent frame 0 is 1, channel s−1 of the
// last latent frame is 1 when last is set, everything else 0.
func checkMask(t *testing.T, cond []float32, s, frames, hw int, last bool) {
	t.Helper()
	for ch := range s {
		for f := range frames {
			want := float32(0)
			if f == 0 || (last && f == frames-1 && ch == s-1) {
				want = 1
			}
			plane := cond[(ch*frames+f)*hw:][:hw]
			for i, v := range plane {
				if v != want {
					t.Fatalf("mask channel %d, latent frame %d, position %d: %v, want %v", ch, f, i, v, want)
				}
			}
		}
	}
}

// TestFirstLastFrame: an FLF2V folder encodes the first and last images
// as one CLIP batch ([2, tokens, dim], in that order: swapping the images
// swaps the halves, bit for bit), marks both ends in the mask, and
// generates; one image alone is refused, as the reference fails on it.
func TestFirstLastFrame(t *testing.T) {
	p := openPipeline(t, tinyFLF2V(t))
	if !p.NeedsLastImage() || !p.AcceptsLastImage() {
		t.Fatalf("FLF2V folder: needs last image %v, accepts %v; want both", p.NeedsLastImage(), p.AcceptsLastImage())
	}
	a, b := gradient(t, 45, 37), checkers(t, 30, 50)
	req := Request{Prompt: "a boat on the sea", Height: 32, Width: 32, Frames: 5, Steps: 2, Guidance: 3,
		MaxSeqLen: 512, Seed: 7, Image: a, LastImage: b}
	ab := generateOn(t, p, nil, pipeline.Options{}, req)
	// Sequential CFG gives each pass the two images' states as batched
	// CFG gives each sample: the same video, to the rounding a kernel's
	// row blocking may change (the AVX kernels give the same bits).
	seq := &residency.Plan{Name: "seq", Run: residency.RunOptions{CFG: residency.CFGSequential}}
	maxDiff(t, "sequential CFG against batched", generateOn(t, p, seq, pipeline.Options{}, req).Video, ab.Video, 1e-5)
	req.Image, req.LastImage = b, a
	ba := generateOn(t, p, nil, pipeline.Options{}, req)
	const n = 5 * 32 // (28/14)² + 1 tokens of width 32
	if len(ab.ImageEmbeds) != 2*n {
		t.Fatalf("%d image embedding values, want %d (two images)", len(ab.ImageEmbeds), 2*n)
	}
	if !sameBits(ab.ImageEmbeds[:n], ba.ImageEmbeds[n:]) || !sameBits(ab.ImageEmbeds[n:], ba.ImageEmbeds[:n]) {
		t.Errorf("swapping the images did not swap the embeddings' halves")
	}
	if sameBits(ab.ImageEmbeds[:n], ab.ImageEmbeds[n:]) {
		t.Errorf("both images have the same embeddings")
	}
	s, frames, hw := 4, 2, 4*4
	checkMask(t, ab.Condition, s, frames, hw, true)
	for _, v := range ab.Video {
		if math.IsNaN(float64(v)) || v < 0 || v > 1 {
			t.Fatalf("video value %v outside [0, 1]", v)
		}
	}
	rt := registered(t, p, nil)
	req.LastImage = nil
	_, err := p.Generate(rt, req, false)
	if err == nil || !strings.Contains(err.Error(), "needs a last frame") {
		t.Errorf("one image on an FLF2V folder: error %v, want one asking for a last frame", err)
	}
}

// TestLastFrameCondition: on a Wan 2.2 I2V folder (no image encoder) the
// last image is the condition video's last frame. The Wan VAE is causal
// in time, so the condition's latent frames before the last are the
// first-frame-only request's, bit for bit, and the last differs; the mask
// marks the last video frame.
func TestLastFrameCondition(t *testing.T) {
	p := openPipeline(t, tinyI2VMoE(t))
	if p.HasImageEncoder() || p.NeedsLastImage() || !p.AcceptsLastImage() || !p.RequiresImage() {
		t.Fatalf("I2V A14B layout: encoder %v, needs last %v, accepts last %v, requires image %v",
			p.HasImageEncoder(), p.NeedsLastImage(), p.AcceptsLastImage(), p.RequiresImage())
	}
	req := Request{Prompt: "a boat on the sea", Height: 32, Width: 32, Frames: 9, Steps: 2, Guidance: 3,
		MaxSeqLen: 512, Seed: 7, Image: gradient(t, 45, 37)}
	first := generateOn(t, p, nil, pipeline.Options{}, req)
	req.LastImage = checkers(t, 30, 50)
	both := generateOn(t, p, nil, pipeline.Options{}, req)
	s, z, frames, hw := 4, p.ZDim(), 3, 4*4
	if want := (s + z) * frames * hw; len(both.Condition) != want || len(first.Condition) != want {
		t.Fatalf("conditions of %d and %d values, want %d", len(first.Condition), len(both.Condition), want)
	}
	checkMask(t, first.Condition, s, frames, hw, false)
	checkMask(t, both.Condition, s, frames, hw, true)
	lastDiffers := false
	for ch := range z {
		at := ((s + ch) * frames) * hw
		early := (frames - 1) * hw
		if !sameBits(first.Condition[at:at+early], both.Condition[at:at+early]) {
			t.Fatalf("latent channel %d: frames before the last changed with a last image", ch)
		}
		if !sameBits(first.Condition[at+early:at+frames*hw], both.Condition[at+early:at+frames*hw]) {
			lastDiffers = true
		}
	}
	if !lastDiffers {
		t.Errorf("the last latent frame is the same with and without a last image")
	}
	if sameBits(first.Video, both.Video) {
		t.Errorf("the last image did not change the video")
	}
}

// TestCheckImages: each folder kind takes the images it can use and
// refuses the others with a line that says what to do.
func TestCheckImages(t *testing.T) {
	img := gradient(t, 16, 16)
	ti2v := openPipeline(t, "testdata/wan22_ti2v_i2v_pipeline/pipeline")
	if err := ti2v.SetImageMode(true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		p           *Pipeline
		first, last bool
		frames      int
		want        string // "" accepts
	}{
		{"t2v image", openPipeline(t, "testdata/wan_pipeline/pipeline"), true, false, 5, "text-to-video"},
		{"t2v last", openPipeline(t, "testdata/wan_pipeline/pipeline"), false, true, 5, "text-to-video"},
		{"i2v first", openPipeline(t, tinyI2V(t)), true, false, 5, ""},
		{"i2v none", openPipeline(t, tinyI2V(t)), false, false, 5, "starts from an image"},
		{"i2v last", openPipeline(t, tinyI2V(t)), true, true, 5, "takes one image's embeddings"},
		{"ti2v last", ti2v, true, true, 5, "first frame only"},
		{"flf2v both", openPipeline(t, tinyFLF2V(t)), true, true, 5, ""},
		{"flf2v first", openPipeline(t, tinyFLF2V(t)), true, false, 5, "needs a last frame too"},
		{"i2v-moe first", openPipeline(t, tinyI2VMoE(t)), true, false, 5, ""},
		{"i2v-moe both", openPipeline(t, tinyI2VMoE(t)), true, true, 5, ""},
		{"i2v-moe one frame", openPipeline(t, tinyI2VMoE(t)), true, true, 1, "more than one frame"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Request{Frames: c.frames}
			if c.first {
				r.Image = img
			}
			if c.last {
				r.LastImage = img
			}
			err := c.p.CheckImages(r)
			var ie *ImageError
			if err != nil && !errors.As(err, &ie) {
				t.Fatalf("error %v is no *ImageError", err)
			}
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestFirstLastFramePeaksPredicted: the planner's peaks equal the
// measured ones for FLF2V (CLIP on two images, the position embedding;
// the wide tower's activations set the device peak) and for a last frame
// on the Wan 2.2 I2V layout, resident and streamed.
func TestFirstLastFramePeaksPredicted(t *testing.T) {
	for _, c := range []struct {
		name, dir string
	}{{"flf2v", tinyFLF2V(t)}, {"flf2v-wide", wideFLF2V(t)}, {"i2v-moe", tinyI2VMoE(t)}} {
		req := Request{Prompt: "a lighthouse", Height: 32, Width: 48, Frames: 9, Steps: 2, Guidance: 5,
			MaxSeqLen: 512, Seed: 1, Image: gradient(t, 45, 37), LastImage: checkers(t, 30, 50)}
		prof, err := planner.ProfileFromFolder(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, pc := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
			t.Run(c.name+"/"+string(pc.Placement), func(t *testing.T) {
				plan := residency.Uniform("p", pc, append(slices.Clone(Components), ImageEncoder, Transformer2)...)
				m, prompt := measurePeaks(t, c.dir, plan, req)
				checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
			})
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
