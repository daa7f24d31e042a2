package wan

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
)

// The wan22_moe_pipeline golden case: WanPipeline with transformer,
// transformer_2 and boundary_ratio 0.875, guidance 5 then 3, UniPC over 6
// steps of which the first 2 run the high-noise expert.
const (
	moeDir      = "testdata/wan22_moe_pipeline"
	moePrompt   = "A red kite above a windy beach"
	moeNegative = "blurry"
)

func moeRequest(t *testing.T) Request {
	in := tensors(t, filepath.Join(moeDir, "inputs.safetensors"))
	g2 := 3.0
	return Request{Prompt: moePrompt, NegativePrompt: moeNegative, Height: 32, Width: 48, Frames: 9,
		Steps: 6, Guidance: 5, Guidance2: &g2, MaxSeqLen: 24, Latents: in["latents"]}
}

// runMoE generates r on the golden folder (dir, when not "", is a copy
// with another model_index.json) under plan.
func runMoE(t *testing.T, dir string, plan *residency.Plan, r Request) *Output {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(moeDir, "pipeline")
	}
	p := openPipeline(t, dir)
	if !p.TwoExperts() {
		t.Fatal("the golden folder opened as one transformer")
	}
	return generateOn(t, p, plan, pipeline.Options{}, r)
}

// TestGoldenMoE compares every step's latents and the video with
// diffusers, and checks the experts ran the steps the manifest says.
func TestGoldenMoE(t *testing.T) {
	want := tensors(t, filepath.Join(moeDir, "outputs.safetensors"))
	out := runMoE(t, "", nil, moeRequest(t))
	wantExperts := []string{Transformer, Transformer, Transformer2, Transformer2, Transformer2, Transformer2}
	if fmt.Sprint(out.StepExpert) != fmt.Sprint(wantExperts) {
		t.Errorf("experts per step %v, want %v", out.StepExpert, wantExperts)
	}
	steps := want["step_latents"]
	n := len(steps) / 6
	for i, got := range out.StepLatents {
		maxDiff(t, fmt.Sprintf("step_latents[%d]", i), got, steps[i*n:(i+1)*n], atolLatents)
	}
	maxDiff(t, "video_np", out.Video, want["video_np"], atolVideo)
}

// TestMoEGuidance2Default: without guidance_scale_2 the low-noise expert
// guides with guidance_scale (diffusers); with it, the result differs.
func TestMoEGuidance2Default(t *testing.T) {
	r := moeRequest(t)
	r.Steps = 3
	five := 5.0
	r.Guidance2 = &five
	explicit := runMoE(t, "", nil, r)
	r.Guidance2 = nil
	implicit := runMoE(t, "", nil, r)
	three := 3.0
	r.Guidance2 = &three
	other := runMoE(t, "", nil, r)
	same, differs := true, false
	for i := range explicit.Video {
		same = same && math.Float32bits(explicit.Video[i]) == math.Float32bits(implicit.Video[i])
		differs = differs || explicit.Video[i] != other.Video[i]
	}
	if !same {
		t.Error("guidance_2 unset does not equal guidance_2 = guidance")
	}
	if !differs {
		t.Error("guidance_2 3 gives the video guidance_2 5 gives: the low-noise scale is not used")
	}
}

// TestMoEPlansBitIdentical: resident, stream k=1 (with the handoff across
// the switch) and stream from disk give the same bits.
func TestMoEPlansBitIdentical(t *testing.T) {
	r := moeRequest(t)
	comps := []string{TextEncoder, Transformer, Transformer2, VAE}
	ref := runMoE(t, "", residency.Uniform("resident", residency.ComponentPlan{Placement: residency.Resident}, comps...), r)
	for _, tc := range []struct {
		name string
		plan residency.ComponentPlan
	}{
		{"stream k=1", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}},
		{"stream k=2 disk", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 2, Tier: residency.TierDisk}},
		{"onload", residency.ComponentPlan{Placement: residency.Onload}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runMoE(t, "", residency.Uniform(tc.name, tc.plan, comps...), r)
			for i := range ref.Video {
				if math.Float32bits(got.Video[i]) != math.Float32bits(ref.Video[i]) {
					t.Fatalf("video value %d: %v, resident %v", i, got.Video[i], ref.Video[i])
				}
			}
		})
	}
}

// withIndex copies the golden folder's model_index.json with the given
// body into a new folder whose components link to the golden ones.
func withIndex(t *testing.T, index string) string {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join(moeDir, "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae"} {
		if err := os.Symlink(filepath.Join(src, c), filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.ModelIndexName), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFastTokenizerClass: a folder whose model_index names
// T5TokenizerFast (as the Wan repositories do) or AutoTokenizer ends a
// prompt ending in "</s>" with a second </s>, as diffusers' fast tokenizer
// does; T5Tokenizer's folder leaves it out, as the slow one does.
func TestFastTokenizerClass(t *testing.T) {
	tail := `"boundary_ratio": 0.875, "transformer_2": ["diffusers", "WanTransformer3DModel"]}`
	for _, c := range []struct {
		class string
		eos   int
	}{{"T5Tokenizer", 1}, {"T5TokenizerFast", 2}, {"AutoTokenizer", 2}} {
		index := strings.Replace(indexHead, `"T5Tokenizer"`, `"`+c.class+`"`, 1) + tail
		p := openPipeline(t, withIndex(t, index))
		ids, _ := p.tok.EncodeForModel("a cat</s>", 0)
		n := 0
		for n < len(ids) && ids[len(ids)-1-n] == p.tok.EOSID() {
			n++
		}
		if n != c.eos {
			t.Errorf("%s: ids %v end with %d </s>, want %d", c.class, ids, n, c.eos)
		}
	}
}

const indexHead = `{"_class_name": "WanPipeline", "_diffusers_version": "0.40.0",
 "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
 "tokenizer": ["transformers", "T5Tokenizer"], "transformer": ["diffusers", "WanTransformer3DModel"],
 "vae": ["diffusers", "AutoencoderKLWan"], `

// TestOpenExperts: what folders open as, and the one-line refusals.
func TestOpenExperts(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		two        bool
		err        string
	}{
		{"two experts", `"boundary_ratio": 0.875, "transformer_2": ["diffusers", "WanTransformer3DModel"]}`, true, ""},
		{"no boundary: transformer alone", `"boundary_ratio": null, "transformer_2": ["diffusers", "WanTransformer3DModel"]}`, false, ""},
		{"second declared absent", `"boundary_ratio": null, "transformer_2": [null, null]}`, false, ""},
		{"boundary without expert", `"boundary_ratio": 0.875, "transformer_2": [null, null]}`, false, "no transformer_2"},
		{"boundary out of range", `"boundary_ratio": 1.5, "transformer_2": ["diffusers", "WanTransformer3DModel"]}`, false, "want a number in (0, 1]"},
		{"boundary not a number", `"boundary_ratio": "high", "transformer_2": ["diffusers", "WanTransformer3DModel"]}`, false, "want a number in (0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := checkpoint.OpenFolder(withIndex(t, indexHead+tc.tail))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := Open(f)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.TwoExperts() != tc.two {
				t.Errorf("two experts %v, want %v", p.TwoExperts(), tc.two)
			}
		})
	}
}

// TestPlannerSwitchStep: the step the planner predicts for the switch,
// from the folder's scheduler config, the steps, the shift and the
// boundary alone, is the step the pipeline switched at.
func TestPlannerSwitchStep(t *testing.T) {
	for _, tc := range []struct {
		steps    int
		shift    float64
		boundary float64
	}{
		{6, 0, 0.875}, // the golden case: 2 high-noise steps
		{4, 0, 0.875},
		{5, 1, 0.875},
		{7, 8, 0.875},
		{5, 3, 0.5},
		{4, 3, 0.999}, // the first timestep (999) is the only one above
		{3, 0, 1},     // no timestep reaches 1000: low-noise only
		{4, 12, 0.1},  // never below 100 before the end
	} {
		t.Run(fmt.Sprintf("steps%d_shift%g_boundary%g", tc.steps, tc.shift, tc.boundary), func(t *testing.T) {
			dir := withIndex(t, indexHead+fmt.Sprintf(`"boundary_ratio": %g, "transformer_2": ["diffusers", "WanTransformer3DModel"]}`, tc.boundary))
			prof, err := planner.ProfileFromFolder(dir)
			if err != nil {
				t.Fatal(err)
			}
			predicted, err := prof.SwitchStep(tc.steps, tc.shift)
			if err != nil {
				t.Fatal(err)
			}
			r := moeRequest(t)
			r.Steps, r.FlowShift = tc.steps, tc.shift
			out := runMoE(t, dir, nil, r)
			actual := slices.Index(out.StepExpert, Transformer2)
			if actual < 0 {
				actual = tc.steps
			}
			t.Logf("switch at step %d of %d", actual, tc.steps)
			if predicted != actual {
				t.Errorf("planner switches at step %d, the pipeline did at %d (%v)", predicted, actual, out.StepExpert)
			}
			for i, e := range out.StepExpert {
				if want := map[bool]string{true: Transformer, false: Transformer2}[i < actual]; e != want {
					t.Errorf("step %d ran %s, want %s", i, e, want)
				}
			}
		})
	}
}

// FuzzNumTrainTimesteps: any scheduler config gives a positive count or
// an error, never a panic.
func FuzzNumTrainTimesteps(f *testing.F) {
	for _, s := range []string{`{}`, `{"num_train_timesteps": 1000}`, `{"num_train_timesteps": -3}`, `{"num_train_timesteps": "x"}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := NumTrainTimesteps(raw)
		if err == nil && n < 1 {
			t.Fatalf("%q: %d timesteps without an error", raw, n)
		}
	})
}
