package wan

import (
	"math"
	"path/filepath"
	"testing"

	"ferry/catalog"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/imageproc"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/synth"
)

// tinyI2V is a Wan 2.1 I2V folder at toy sizes as `ferry synth` writes
// them (image encoder, image processor, 36-channel transformer with image
// attention).
func tinyI2V(t *testing.T) string {
	t.Helper()
	return tinyI2VWith(t, nil)
}

// tinyI2VWith is tinyI2V with edit applied to its catalog entry (nil:
// none) before it is written.
func tinyI2VWith(t *testing.T, edit func(*catalog.Wan)) string {
	t.Helper()
	w := catalog.WanTinyI2V()
	if edit != nil {
		edit(&w)
	}
	return writeTiny(t, w)
}

// writeTiny writes the folder of w in float32 and returns its path.
func writeTiny(t *testing.T, w catalog.Wan) string {
	t.Helper()
	arch, err := synth.Wan(w)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), w.Name)
	if err := synth.Write(dir, arch, synth.Options{Seed: 3, DType: dtype.F32}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// gradient is a w×h test image: smooth ramps, so that resizing matters.
func gradient(t *testing.T, w, h int) *imageproc.RGB {
	t.Helper()
	pix := make([]uint8, 3*w*h)
	for y := range h {
		for x := range w {
			i := 3 * (y*w + x)
			pix[i], pix[i+1], pix[i+2] = uint8(255*x/w), uint8(255*y/h), uint8((x*y)%256)
		}
	}
	img, err := imageproc.NewRGB(w, h, pix)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestSynthI2VFolder: a synthesized image-to-video folder opens, plans
// with its image encoder, and generates from an image of another size
// than the video (the Lanczos resize of the VAE path, CLIP's own resize
// and crop), the same bits resident and with the image encoder computed
// on the host.
func TestSynthI2VFolder(t *testing.T) {
	dir := tinyI2V(t)
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if prof.Component(planner.ImageEncoder) == nil {
		t.Fatalf("profile components %v lack the image encoder", prof.ComponentNames())
	}
	req := Request{Prompt: "a boat on the sea", Height: 32, Width: 32, Frames: 5, Steps: 2, Guidance: 3,
		MaxSeqLen: 512, Seed: 7, Image: gradient(t, 45, 37)}
	var ref []float32
	for _, plan := range []*residency.Plan{
		nil,
		{Name: "host", Components: map[string]residency.ComponentPlan{ImageEncoder: {Placement: residency.Host}}},
	} {
		f, err := checkpoint.OpenFolder(dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if !p.RequiresImage() || !p.HasImageEncoder() {
			t.Fatalf("requires image %v, image encoder %v; want both", p.RequiresImage(), p.HasImageEncoder())
		}
		rt, err := pipeline.NewRuntime(pipeline.Budget{}, plan, pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Register(rt.Exec); err != nil {
			t.Fatal(err)
		}
		out, err := p.Generate(rt, req, true)
		rt.Close()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(out.ImageEmbeds) != 5*32 { // (28/14)² + 1 tokens of width 32
			t.Fatalf("%d image embedding values, want %d", len(out.ImageEmbeds), 5*32)
		}
		if ref == nil {
			ref = out.Video
			continue
		}
		for i := range ref {
			if math.Float32bits(out.Video[i]) != math.Float32bits(ref[i]) {
				t.Fatalf("host image encoder: value %d is %v, resident %v", i, out.Video[i], ref[i])
			}
		}
	}
}

// TestModelInput: Wan 2.1's condition channels follow each sample's
// latents, TI2V's image frame replaces frame 0 of every sample, and
// text-to-video passes the latents through.
func TestModelInput(t *testing.T) {
	shape := []int{2, 2, 3, 1, 2} // B, z, T, h, w
	x := make([]float32, 24)
	for i := range x {
		x[i] = float32(i + 1)
	}
	p := &Pipeline{}
	if got, s := p.modelInput(x, shape); &got[0] != &x[0] || s[1] != 2 {
		t.Errorf("text-to-video changed the input")
	}
	p.ext.cond = &condition{channels: []float32{-1, -2, -3, -4, -5, -6}} // one channel [3, 1, 2]
	got, s := p.modelInput(x, shape)
	if s[1] != 3 || len(got) != 36 {
		t.Fatalf("concat: shape %v, %d values", s, len(got))
	}
	if got[12] != -1 || got[17] != -6 || got[18] != 13 || got[30] != -1 {
		t.Errorf("concat: %v", got)
	}
	p.ext.cond = &condition{first: []float32{-1, -2, -3, -4}} // [z, h·w]
	got, s = p.modelInput(x, shape)
	if s[1] != 2 || got[0] != -1 || got[1] != -2 || got[2] != 3 || got[6] != -3 || got[12] != -1 || got[23] != 24 {
		t.Errorf("first frame: %v", got)
	}
	if x[0] != 1 {
		t.Errorf("modelInput wrote into its input")
	}
}
