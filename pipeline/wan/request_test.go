package wan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/torchrng"
)

// TestCleanPrompt: WanPipeline's prompt_clean with ftfy installed (as
// diffusers 0.40.0 runs it when ftfy is importable).
func TestCleanPrompt(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "A cat walks on the grass, realistic", "A cat walks on the grass, realistic"},
		{"curly quotes, ends trimmed", "  “Hello,” she said. ‘Bye’  ", `"Hello," she said. 'Bye'`},
		{"ligatures", "ﬁreﬂies over a ﬁeld", "fireflies over a field"},
		{"fullwidth letters and ideographic space", "ＬＯＵＤ　ｎｏｉｓｅ", "LOUD noise"},
		{"CRLF and tabs collapse", "line one\r\n\tline two\r\n", "line one line two"},
		{"control characters removed", "a\x00b\x07c\x7f", "abc"},
		{"terminal escapes removed", "\x1b[1mbold\x1b[0m cat", "bold cat"},
		{"\\x1c inside removed, not a space", "a\x1cb", "ab"},
		{"\\x1c at the ends removed", "\x1c a cat \x1f", "a cat"},
		{"HTML entities, nested ones too", "fish &amp;amp;amp; chips &eacute;t&eacute;", "fish & chips été"},
		{"'<' keeps ftfy off entities; html.unescape twice still runs", "<b>fish &amp;amp; chips</b>", "<b>fish & chips</b>"},
		{"numeric control reference dropped", "x&#28;y", "xy"},
		{"C1 ellipsis", "wait\u0085 what", "wait… what"},
		{"no-break and ideographic spaces are white space", "a\u00a0\u3000 b", "a b"},
		{"mojibake repaired", "A cafÃ© in Ã\u00a0 la mode â€” a crÃ¨me brÃ»lÃ©e", "A café in à la mode — a crème brûlée"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CleanPrompt(tt.in); got != tt.want {
				t.Errorf("CleanPrompt(%+q) = %+q, want %+q", tt.in, got, tt.want)
			}
		})
	}
}

// TestDefaultsFrames: frames are rounded as WanPipeline.__call__ rounds
// num_frames (n // 4 * 4 + 1 when n % 4 != 1, at least 1), with a note
// for the user; 0 is the CLI's "not given".
func TestDefaultsFrames(t *testing.T) {
	tests := []struct {
		in, want int
		note     bool
	}{
		{0, 81, false},
		{1, 1, false},
		{9, 9, false},
		{81, 81, false},
		{10, 9, true},
		{12, 13, true},
		{8, 9, true},
		{2, 1, true},
		{4, 5, true},
		{80, 81, true},
		{-3, 1, true},
		{-2, 1, true},
	}
	for _, tt := range tests {
		r := Request{Frames: tt.in}
		notes := r.Defaults()
		if r.Frames != tt.want {
			t.Errorf("frames %d: got %d, want %d", tt.in, r.Frames, tt.want)
		}
		if (len(notes) > 0) != tt.note {
			t.Errorf("frames %d: notes %q, want a note: %v", tt.in, notes, tt.note)
		}
		if tt.note && !strings.Contains(notes[0], "4k+1") {
			t.Errorf("frames %d: note %q does not say why", tt.in, notes[0])
		}
		if err := r.Check(); err != nil {
			t.Errorf("frames %d: rounded request fails Check: %v", tt.in, err)
		}
	}
}

// TestSchedulerShift: the flow-shift override lands on the key the
// scheduler class reads, so the schedule is the one its config would
// give with that shift written in.
func TestSchedulerShift(t *testing.T) {
	unipc := `{"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction",
		"use_flow_sigmas": true, "flow_shift": %s}`
	euler := `{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": %s}`
	tests := []struct {
		name, config string
	}{
		{"UniPC reads flow_shift", unipc},
		{"FlowMatchEuler reads shift", euler},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := sigmasOf(t, &Pipeline{schedRaw: []byte(strings.Replace(tt.config, "%s", "1.0", 1))}, 0)
			got := sigmasOf(t, &Pipeline{schedRaw: []byte(strings.Replace(tt.config, "%s", "1.0", 1))}, 5)
			want := sigmasOf(t, &Pipeline{schedRaw: []byte(strings.Replace(tt.config, "%s", "5.0", 1))}, 0)
			if !slices.Equal(got, want) {
				t.Errorf("--flow-shift 5 gives sigmas %v, the config with shift 5 %v", got, want)
			}
			if slices.Equal(got, base) {
				t.Errorf("--flow-shift 5 left the sigmas at shift 1: %v", got)
			}
		})
	}
}

func sigmasOf(t *testing.T, p *Pipeline, shift float64) []float32 {
	t.Helper()
	s, err := p.scheduler(shift)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimesteps(8); err != nil {
		t.Fatal(err)
	}
	return s.Sigmas()
}

// TestOpenRefusesWan22: folders WanPipeline 0.40.0 runs as Wan 2.2 with
// two experts are refused before anything is read; a
// Wan 2.1 folder opens.
func TestOpenRefusesWan22(t *testing.T) {
	tests := []struct {
		name  string
		extra string // model_index.json entries
		want  string // "" opens
	}{
		// Two experts run (moe_test.go); a boundary without the low-noise
		// expert, or one that is not a ratio, does not.
		{"boundary_ratio", `"boundary_ratio": 0.875, "transformer_2": [null, null]`, "boundary_ratio 0.875 but no transformer_2 component"},
		{"boundary_ratio text", `"boundary_ratio": "high", "transformer_2": ["diffusers", "WanTransformer3DModel"]`, "want a number in (0, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tinyFolder(t, tt.extra)
			_, err := Open(f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	f, err := checkpoint.OpenFolder(filepath.Join(goldenDir, "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Open(f); err != nil {
		t.Errorf("Wan 2.1 folder (boundary_ratio null, transformer_2 [null, null]): %v", err)
	}
}

// tinyFolder writes a WanPipeline model_index.json with extra entries and
// an empty folder for each component.
func tinyFolder(t *testing.T, extra string) *checkpoint.Folder {
	t.Helper()
	dir := t.TempDir()
	index := `{"_class_name": "WanPipeline", "scheduler": ["diffusers", "UniPCMultistepScheduler"],
		"text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5Tokenizer"],
		"transformer": ["diffusers", "WanTransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"], ` + extra + `}`
	if err := os.WriteFile(filepath.Join(dir, checkpoint.ModelIndexName), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae"} {
		if err := os.Mkdir(filepath.Join(dir, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestSeedNoise: a stochastic scheduler draws its step noise from the
// request's seed, the same for the same seed and not for another; a
// deterministic one is left alone.
func TestSeedNoise(t *testing.T) {
	run := func(config string, seed uint64) []float32 {
		s, err := (&Pipeline{schedRaw: []byte(config)}).scheduler(0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetTimesteps(3); err != nil {
			t.Fatal(err)
		}
		seedNoise(s, torchrng.New(seed))
		x, v := make([]float32, 16), make([]float32, 16)
		for i := range x {
			x[i], v[i] = float32(i)/16, 0.5
		}
		for range 3 {
			if err := s.Step(v, x); err != nil {
				t.Fatal(err)
			}
		}
		return x
	}
	stochastic := `{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0, "stochastic_sampling": true}`
	plain := `{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0}`
	a, b, c := run(stochastic, 7), run(stochastic, 7), run(stochastic, 8)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different stochastic steps")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 7 and 8 gave the same stochastic steps")
	}
	if !slices.Equal(run(plain, 7), run(plain, 8)) {
		t.Error("the seed changed a deterministic scheduler's steps")
	}
}

// TestFitSize: sizes that are multiples of 16 but not of the model's patch
// of latents are rounded down, as WanPipeline.__call__ does (TI2V's 32:
// 720x1280 runs at 704x1280), and Generate runs the rounded size; other
// sizes are left for Check and CheckSize to refuse.
func TestFitSize(t *testing.T) {
	p := openPipeline(t, "testdata/wan22_ti2v_t2v_pipeline/pipeline")
	if m := p.SizeMultiple(); m != 32 {
		t.Fatalf("TI2V's size multiple is %d, want 32", m)
	}
	for _, c := range []struct{ h, w, wantH, wantW int }{
		{720, 1280, 704, 1280}, {64, 96, 64, 96}, {48, 80, 32, 64},
		{16, 64, 16, 64}, // below one patch: refused later
		{50, 96, 50, 96}, // not a multiple of 16: refused later
	} {
		if h, w := p.FitSize(c.h, c.w); h != c.wantH || w != c.wantW {
			t.Errorf("FitSize(%d, %d) = %d, %d; want %d, %d", c.h, c.w, h, w, c.wantH, c.wantW)
		}
	}
	wan21 := openPipeline(t, "testdata/wan_pipeline/pipeline")
	if h, w := wan21.FitSize(48, 80); h != 48 || w != 80 {
		t.Errorf("Wan 2.1 (multiples of 16) changed 48x80 to %dx%d", h, w)
	}
	out, err := p.Generate(registered(t, p, nil), Request{Prompt: "a boat", Height: 48, Width: 80, Frames: 1, Steps: 1, Guidance: 1, MaxSeqLen: 16}, false)
	if err != nil {
		t.Fatal(err)
	}
	if out.H != 32 || out.W != 64 {
		t.Errorf("Generate at 48x80 made %dx%d frames, want 32x64", out.H, out.W)
	}
}
