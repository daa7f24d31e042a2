package umt5

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/modeltest"
	"ferry/residency"
)

// The golden cases (testdata/README.md says where each file comes from).
// Every one compares all positions, padded ones included.
var goldenCases = []struct {
	dir        string
	atol, rtol float64 // the manifest's tolerance
}{
	{"t5_encoder", 1e-4, 1e-4},
	{"umt5_encoder", 1e-4, 1e-4},
	{"umt5_encoder_bf16", 1e-4, 1e-4},
}

func openSet(t *testing.T, path string) *checkpoint.Set {
	t.Helper()
	set, err := checkpoint.OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set
}

func loadConfig(t *testing.T, dir string) Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// readInts reads an int64 tensor as int32 with its shape.
func readInts(t *testing.T, set *checkpoint.Set, name string) ([]int32, []int) {
	t.Helper()
	info, ok := set.Lookup(name)
	if !ok || info.DType != dtype.I64 {
		t.Fatalf("%s: no int64 tensor %q", set.Path(), name)
	}
	raw, err := set.Bytes(info)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(raw)/8)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out, info.Shape
}

func readFloats(t *testing.T, set *checkpoint.Set, name string) []float32 {
	t.Helper()
	info, ok := set.Lookup(name)
	if !ok {
		t.Fatalf("%s: no tensor %q", set.Path(), name)
	}
	v, err := set.ReadF32(info)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGolden runs each case with the exact reference GEMM and with the
// fast one a pipeline uses (gemm.Best).
func TestGolden(t *testing.T) {
	for _, gc := range goldenCases {
		for _, g := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
			t.Run(gc.dir+"/"+g.Name(), func(t *testing.T) { testGolden(t, gc.dir, g, gc.atol, gc.rtol) })
		}
	}
}

func testGolden(t *testing.T, name string, g gemm.Impl, atol, rtol float64) {
	dir := filepath.Join("testdata", name)
	cfg := loadConfig(t, dir)
	inputs := openSet(t, filepath.Join(dir, "inputs.safetensors"))
	ids, shape := readInts(t, inputs, "input_ids")
	mask, _ := readInts(t, inputs, "attention_mask")
	want := readFloats(t, openSet(t, filepath.Join(dir, "outputs.safetensors")), "last_hidden_state")

	r := newRigWith(t, nil, g)
	m := r.encoder(t, cfg, residency.SourceOf(openSet(t, filepath.Join(dir, "model.safetensors"))))
	got := r.encode(t, m, ids, mask, shape[0], shape[1])
	worst := modeltest.Compare(t, "last_hidden_state", got, want, atol, rtol)
	t.Logf("%s with %s GEMM: max abs error %.3g (atol %g, rtol %g)", name, g.Name(), worst, atol, rtol)
}

// TestGoldenWanPrompts encodes the Wan pipeline golden's prompt and negative
// prompt with its text encoder. The stored embeddings are what WanPipeline
// keeps: the first mask.sum() rows of last_hidden_state, then zeros up to
// max_sequence_length (the trimming is the pipeline's job, not the
// encoder's), so the real rows are compared and the rest must be zeros.
func TestGoldenWanPrompts(t *testing.T) {
	dir := filepath.Join("testdata", "wan_text_encoder")
	cfg := loadConfig(t, dir)
	inputs := openSet(t, filepath.Join(dir, "inputs.safetensors"))
	outputs := openSet(t, filepath.Join(dir, "outputs.safetensors"))
	r := newRig(t, nil)
	m := r.encoder(t, cfg, residency.SourceOf(openSet(t, filepath.Join(dir, "model.safetensors"))))
	for _, c := range []struct{ prefix, output string }{
		{"prompt", "prompt_embeds"}, {"negative", "negative_prompt_embeds"},
	} {
		t.Run(c.output, func(t *testing.T) {
			ids, shape := readInts(t, inputs, c.prefix+"_input_ids")
			mask, _ := readInts(t, inputs, c.prefix+"_attention_mask")
			want := readFloats(t, outputs, c.output)
			got := r.encode(t, m, ids, mask, shape[0], shape[1])
			n := 0
			for _, v := range mask {
				n += int(v)
			}
			real := n * cfg.DModel
			worst := modeltest.Compare(t, c.output+" (real tokens)", got[:real], want[:real], 1e-4, 0)
			for i, v := range want[real:] {
				if v != 0 {
					t.Fatalf("%s[%d] past the %d real tokens is %g, expected the pipeline's zero padding", c.output, real+i, n, v)
				}
			}
			t.Logf("%s: %d real tokens, max abs error %.3g (atol 1e-4)", c.output, n, worst)
		})
	}
}

// TestParamsMatchGoldenCheckpoints checks Params name for name and shape
// for shape against every golden checkpoint.
func TestParamsMatchGoldenCheckpoints(t *testing.T) {
	for _, dir := range []string{"t5_encoder", "umt5_encoder", "umt5_encoder_bf16", "wan_text_encoder"} {
		t.Run(dir, func(t *testing.T) {
			dir := filepath.Join("testdata", dir)
			cfg := loadConfig(t, dir)
			set := openSet(t, filepath.Join(dir, "model.safetensors"))
			listed := map[string]bool{}
			for _, p := range cfg.Params() {
				if listed[p.Name] {
					t.Errorf("%s listed twice", p.Name)
				}
				listed[p.Name] = true
				info, ok := set.Lookup(p.Name)
				if !ok {
					t.Errorf("Params lists %s %v, the checkpoint lacks it", p.Name, p.Shape)
					continue
				}
				if !slices.Equal(info.Shape, p.Shape) {
					t.Errorf("%s: Params says %v, the checkpoint has %v", p.Name, p.Shape, info.Shape)
				}
			}
			for _, name := range set.Names() {
				if !listed[name] {
					t.Errorf("the checkpoint has %s, Params does not list it", name)
				}
			}
		})
	}
}

// TestParamsBlocks checks the block of every parameter and the byte count
// of one UMT5-XXL layer, which the planner streams.
func TestParamsBlocks(t *testing.T) {
	cfg := tinyConfig(t, `{"model_type":"umt5","vocab_size":256384,"d_model":4096,"d_kv":64,"d_ff":10240,"num_layers":24,"num_heads":64,"feed_forward_proj":"gated-gelu"}`)
	perBlock := map[string]int64{}
	for _, p := range cfg.Params() {
		n := int64(1)
		for _, d := range p.Shape {
			n *= int64(d)
		}
		perBlock[p.Block] += n
		if p.Rows != (p.Name == sharedName) {
			t.Errorf("%s: Rows = %v", p.Name, p.Rows)
		}
	}
	if len(perBlock) != 24+2 {
		t.Errorf("%d blocks, want 26", len(perBlock))
	}
	// 4·4096² attention + 3·4096·10240 feed-forward + 32·64 bias + 2·4096 norms.
	if want := int64(4*4096*4096 + 3*4096*10240 + 32*64 + 2*4096); perBlock["block.7"] != want {
		t.Errorf("block.7 holds %d elements, want %d", perBlock["block.7"], want)
	}
	if perBlock["embed"] != 256384*4096 || perBlock["final"] != 4096 {
		t.Errorf("embed %d, final %d elements", perBlock["embed"], perBlock["final"])
	}
}
