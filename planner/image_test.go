package planner

import (
	"testing"

	"ferry/catalog"
	"ferry/hwprofile"
	"ferry/residency"
)

// TestImageEncoderProfile: the Wan 2.1 I2V profile holds the CLIP tower
// after the text encoder, with the blocks Encode runs (31 layers of
// ViT-H/14's 32 and the embeddings), float32 as published; the simulation
// runs it, so a plan that streams it from disk copies its bytes, and
// FastVideo's --image-encoder-cpu-offload computes it on the host.
func TestImageEncoderProfile(t *testing.T) {
	p, err := Builtin("wan2.1-i2v-14b")
	if err != nil {
		t.Fatal(err)
	}
	names := p.ComponentNames()
	if len(names) < 2 || names[0] != TextEncoder || names[1] != ImageEncoder {
		t.Fatalf("components %v: want the image encoder right after the text encoder", names)
	}
	enc := p.Component(ImageEncoder)
	clip := catalog.CLIPViTH14()
	if got, want := len(enc.Blocks), 1+clip.RunLayers(); got != want {
		t.Errorf("%d image encoder blocks, want %d", got, want)
	}
	if b := enc.StoredBytes(); b < 2<<30 || b > 3<<30 {
		t.Errorf("image encoder stored %d bytes; ViT-H/14's 31 layers in float32 are about 2.3 GiB", b)
	}
	req := Request{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 512, PromptTokens: 8, Steps: 2, Guidance: 5}
	for _, tc := range []struct {
		name string
		plan residency.ComponentPlan
	}{
		{"resident", residency.ComponentPlan{Placement: residency.Resident}},
		{"disk", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk}},
	} {
		plan := residency.Uniform(tc.name, tc.plan, presetComponents()...)
		pred, err := Predict(p, hwprofile.Default(), plan, req, Budgets{})
		if err != nil {
			t.Fatal(err)
		}
		var got *ComponentPrediction
		for i := range pred.Components {
			if pred.Components[i].Name == ImageEncoder {
				got = &pred.Components[i]
			}
		}
		if got == nil {
			t.Fatalf("%s: no image encoder in the prediction", tc.name)
		}
		if got.ComputeS <= 0 {
			t.Errorf("%s: image encoder computes for %gs", tc.name, got.ComputeS)
		}
		if tc.plan.Tier == residency.TierDisk && got.BytesDisk < enc.StoredBytes() {
			t.Errorf("%s: image encoder read %d bytes from disk, want its %d", tc.name, got.BytesDisk, enc.StoredBytes())
		}
	}
	plan, err := FlagPlan([]string{"--" + FlagImageEncoderCPUOffload})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.For(ImageEncoder).Placement; got != residency.Host {
		t.Errorf("--%s places the image encoder %v, want host", FlagImageEncoderCPUOffload, got)
	}
}

// TestWan22VAEScale: the planner's VAE config follows the Wan 2.2 layout
// (patch 2: 16 pixels per latent) and keeps 8 for Wan 2.1.
func TestWan22VAEScale(t *testing.T) {
	for _, tc := range []struct {
		arch  string
		scale int
	}{{"wan2.1-t2v-1.3b", 8}, {"wan2.2-ti2v-5b", 16}, {"wan2.1-i2v-14b", 8}} {
		p, err := Builtin(tc.arch)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Coder.SpatialScale(); got != tc.scale {
			t.Errorf("%s: spatial scale %d, want %d", tc.arch, got, tc.scale)
		}
	}
}

// TestCompleteImageEncoder: a plan that places the text encoder but not
// the image encoder (the search's) places the image encoder alike; a plan
// naming it, or a profile without one, is left as it is.
func TestCompleteImageEncoder(t *testing.T) {
	i2v, err := Builtin("wan2.1-i2v-14b")
	if err != nil {
		t.Fatal(err)
	}
	t2v, err := Builtin("wan2.1-t2v-14b")
	if err != nil {
		t.Fatal(err)
	}
	stream := residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1, Persistent: 3}
	plan := &residency.Plan{Components: map[string]residency.ComponentPlan{TextEncoder: stream}}
	got := Complete(i2v, plan).For(ImageEncoder)
	if got.Placement != residency.Stream || got.Tier != residency.TierDisk || got.Prefetch != 1 || got.Persistent != 0 {
		t.Errorf("image encoder placed %+v, want the text encoder's stream from disk, k=1, no persistent blocks", got)
	}
	if _, ok := plan.Components[ImageEncoder]; ok {
		t.Error("Complete changed its argument")
	}
	host := &residency.Plan{Components: map[string]residency.ComponentPlan{TextEncoder: stream, ImageEncoder: {Placement: residency.Host}}}
	if got := Complete(i2v, host).For(ImageEncoder).Placement; got != residency.Host {
		t.Errorf("a named image encoder placement became %v", got)
	}
	if _, ok := Complete(t2v, plan).Components[ImageEncoder]; ok {
		t.Error("a text-to-video profile got an image encoder placement")
	}
}

// TestFirstLastFrameProfiles: FLF2V's profile encodes two images per
// request, so its image encoder computes about twice as long as I2V's at
// the same request; Wan 2.2 I2V A14B's has two experts, the image-to-video
// condition and no image encoder.
func TestFirstLastFrameProfiles(t *testing.T) {
	req := Request{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 512, PromptTokens: 8, Steps: 2, Guidance: 5}
	clipSeconds := map[string]float64{}
	for _, name := range []string{"wan2.1-i2v-14b", "wan2.1-flf2v-14b"} {
		p := mustBuiltin(t, name)
		plan := residency.Uniform("r", residency.ComponentPlan{Placement: residency.Resident}, presetComponents()...)
		pred, err := Predict(p, hwprofile.Default(), plan, req, Budgets{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pred.Components {
			if c.Name == ImageEncoder {
				clipSeconds[name] = c.ComputeS
			}
		}
	}
	if r := clipSeconds["wan2.1-flf2v-14b"] / clipSeconds["wan2.1-i2v-14b"]; r < 1.8 || r > 2.2 {
		t.Errorf("FLF2V's image encoder computes %.2fx I2V's (%v), want about 2 (two images)", r, clipSeconds)
	}
	p := mustBuiltin(t, "wan2.2-i2v-a14b")
	if p.ImageMode != ImageThenZeros || p.Component(ImageEncoder) != nil || p.Component(Transformer2) == nil {
		t.Errorf("wan2.2-i2v-a14b: image mode %v, components %v; want the image-then-zeros condition, two experts, no image encoder",
			p.ImageMode, p.ComponentNames())
	}
}

// TestWithImage: a TI2V profile's image copy plans the VAE's encoder too
// (more VAE blocks, the image mode set) and leaves the profile as it was.
func TestWithImage(t *testing.T) {
	p := mustBuiltin(t, "wan2.2-ti2v-5b")
	blocks := len(p.Component(VAE).Blocks)
	q, err := p.WithImage()
	if err != nil {
		t.Fatal(err)
	}
	if q.ImageMode != ImageAlone || len(q.Component(VAE).Blocks) <= blocks {
		t.Errorf("image copy: mode %v, %d VAE blocks (decoder alone %d)", q.ImageMode, len(q.Component(VAE).Blocks), blocks)
	}
	if p.ImageMode != NoImage || len(p.Component(VAE).Blocks) != blocks {
		t.Errorf("the profile changed: mode %v, %d VAE blocks, want no image and %d", p.ImageMode, len(p.Component(VAE).Blocks), blocks)
	}
	if _, err := mustBuiltin(t, "wan2.1-t2v-1.3b").WithImage(); err == nil {
		t.Error("a text-to-video profile took an image")
	}
}
