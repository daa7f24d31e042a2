package lora

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/wan"
)

// raw is one tensor a test file holds.
type raw struct {
	name  string
	dt    dtype.DType
	shape []int
	vals  []float64
}

// writeRaw writes tensors (values converted to their dtype) and metadata
// to a new file.
func writeRaw(t testing.TB, tensors []raw, meta map[string]string) string {
	t.Helper()
	var rts []checkpoint.RawTensor
	for _, r := range tensors {
		rts = append(rts, checkpoint.RawTensor{Name: r.name, DType: r.dt, Shape: r.shape, Data: encode(r.dt, r.vals)})
	}
	p := filepath.Join(t.TempDir(), "lora.safetensors")
	if err := checkpoint.WriteFile(p, rts, meta); err != nil {
		t.Fatal(err)
	}
	return p
}

func encode(dt dtype.DType, vals []float64) []byte {
	b := make([]byte, len(vals)*dt.Size())
	for i, v := range vals {
		switch dt {
		case dtype.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case dtype.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(float32(v)))
		case dtype.F16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(float32(v)))
		case dtype.F64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		case dtype.I64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
		case dtype.Bool:
			b[i] = byte(v)
		}
	}
	return b
}

// Values every float dtype holds exactly.
var (
	valsA = []float64{0.5, -1, 0.25, 2, -0.125, 1.5}      // [2, 3]
	valsB = []float64{1, 0, -0.5, 0.75, 3, -2, 0.0625, 4} // [4, 2]
)

func pairOf(a, b string, dt dtype.DType) []raw {
	return []raw{{a, dt, []int{2, 3}, valsA}, {b, dt, []int{4, 2}, valsB}}
}

func alphaOf(name string, dt dtype.DType, shape []int, v float64) raw {
	return raw{name, dt, shape, []float64{v}}
}

// TestReadBiases: a ComfyUI-style file of the kind Kijai's and lightx2v's
// distillation LoRAs are (original names, alphas, diff_b, norm and weight
// differences) reads as diffusers loads it: diff_b added as it is, PEFT's
// lora_B.bias times alpha/rank, a diff_b alone a bias-only adapter, norm
// differences and a Linear's full difference dropped, a time_projection
// diff_b without its pair dropped, and the head's full difference a pair
// whose lora_B is the identity.
func TestReadBiases(t *testing.T) {
	dm := "diffusion_model."
	q, k := dm+"blocks.0.self_attn.q", dm+"blocks.0.self_attn.k"
	head := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12} // [4, 3]
	tensors := append(pairOf(q+".lora_down.weight", q+".lora_up.weight", dtype.BF16),
		alphaOf(q+".alpha", dtype.F32, nil, 4),
		raw{q + ".diff_b", dtype.F32, []int{4}, []float64{0.5, -1, 2, 0}},
		raw{dm + "blocks.0.ffn.2.diff_b", dtype.F16, []int{4}, []float64{1, 2, 3, 4}},
		raw{dm + "blocks.0.norm3.diff", dtype.F32, []int{4}, []float64{1, 1, 1, 1}},
		raw{dm + "blocks.0.norm3.diff_b", dtype.F32, []int{4}, []float64{1, 1, 1, 1}},
		raw{k + ".diff", dtype.F32, []int{4, 3}, head},
		raw{dm + "time_projection.1.diff_b", dtype.F32, []int{4}, []float64{1, 1, 1, 1}},
		raw{dm + "head.head.diff", dtype.F32, []int{4, 3}, head},
		raw{dm + "head.head.diff_b", dtype.F32, []int{4}, []float64{-1, -2, -3, -4}},
	)
	ads, err := Read(writeRaw(t, tensors, nil))
	if err != nil {
		t.Fatal(err)
	}
	byMod := map[string]Adapter{}
	for _, a := range ads {
		byMod[a.Module] = a
	}
	if len(ads) != 3 {
		t.Fatalf("%d adapters %v, want the pair, the bias alone and the head", len(ads), byMod)
	}
	a := byMod["blocks.0.attn1.to_q"]
	if a.Rank != 2 || a.Scale() != 2 || !a.HasBias || !slices.Equal(a.Bias, []float32{0.5, -1, 2, 0}) {
		t.Errorf("to_q: rank %d scale %g bias %v, want rank 2, scale 2 and diff_b as it is", a.Rank, a.Scale(), a.Bias)
	}
	b := byMod["blocks.0.ffn.net.2"]
	if !b.BiasOnly() || b.A != nil || b.Out != 4 || !slices.Equal(b.Bias, []float32{1, 2, 3, 4}) {
		t.Errorf("ffn.net.2: %+v, want a bias alone", b)
	}
	h := byMod["proj_out"]
	if h.Rank != 4 || h.In != 3 || h.Out != 4 || h.Scale() != 1 || len(h.A) != 12 || h.A[11] != 12 || !slices.Equal(h.Bias, []float32{-1, -2, -3, -4}) {
		t.Fatalf("proj_out: %+v, want the difference as lora_A, scale 1, its diff_b", h)
	}
	for i := range 4 {
		for j := range 4 {
			if want := float32(map[bool]int{true: 1}[i == j]); h.B[i*4+j] != want {
				t.Fatalf("proj_out lora_B[%d][%d] = %g, want the identity", i, j, h.B[i*4+j])
			}
		}
	}
	shapes, err := ReadShapes(writeRaw(t, tensors, nil))
	if err != nil || len(shapes) != 3 {
		t.Fatalf("ReadShapes: %d adapters, %v", len(shapes), err)
	}
	for _, s := range shapes {
		if !s.HasBias || s.Bias != nil || s.A != nil {
			t.Errorf("ReadShapes %s: %+v, want HasBias without values", s.Module, s)
		}
	}

	// PEFT's lora_B.bias is scaled as the product is: alpha 8, rank 2.
	d := "blocks.1.attn2.to_v"
	peft := append(pairOf(d+".lora_A.weight", d+".lora_B.weight", dtype.F32), raw{d + ".lora_B.bias", dtype.F32, []int{4}, []float64{1, -1, 0.5, 0}})
	ps, err := Read(writeRaw(t, peft, map[string]string{metadataKey: `{"lora_alpha": 8}`}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !slices.Equal(ps[0].Bias, []float32{4, -4, 2, 0}) {
		t.Errorf("PEFT bias %v, want [4 -4 2 0] (alpha/rank 4)", ps)
	}
}

// TestReadNamings reads one adapter written in every supported naming,
// dtype and source of alpha.
func TestReadNamings(t *testing.T) {
	meta := func(s string) map[string]string { return map[string]string{"format": "pt", metadataKey: s} }
	for _, tc := range []struct {
		name    string
		tensors []raw
		meta    map[string]string
		module  string
		alpha   float32
	}{
		{"diffusers bare F32", pairOf("blocks.0.attn1.to_q.lora_A.weight", "blocks.0.attn1.to_q.lora_B.weight", dtype.F32), nil,
			"blocks.0.attn1.to_q", 2},
		{"diffusers transformer. BF16", pairOf("transformer.blocks.1.ffn.net.2.lora_A.weight", "transformer.blocks.1.ffn.net.2.lora_B.weight", dtype.BF16), nil,
			"blocks.1.ffn.net.2", 2},
		{"PEFT wrapper F16 adapter name", pairOf("base_model.model.proj_out.lora_A.default.weight", "base_model.model.proj_out.lora_B.default.weight", dtype.F16), nil,
			"proj_out", 2},
		{"diffusers metadata prefixed", pairOf("transformer.blocks.0.attn2.to_k.lora_A.weight", "transformer.blocks.0.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"transformer.r": 2, "transformer.lora_alpha": 8, "transformer.target_modules": ["blocks.0.attn2.to_k"], "transformer.alpha_pattern": {}}`),
			"blocks.0.attn2.to_k", 8},
		{"diffusers metadata bare", pairOf("blocks.0.attn2.to_k.lora_A.weight", "blocks.0.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"r": 2, "lora_alpha": 4.5, "target_modules": "to_k"}`), "blocks.0.attn2.to_k", 4.5},
		{"diffusers metadata alpha_pattern", pairOf("blocks.3.attn2.to_k.lora_A.weight", "blocks.3.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"transformer.lora_alpha": 8, "transformer.alpha_pattern": {"attn2.to_k": 16, "blocks.3.attn2.to_k": 32, "blocks.13.attn2.to_k": 64}}`),
			"blocks.3.attn2.to_k", 32},
		{"diffusers metadata rslora", pairOf("blocks.0.attn2.to_k.lora_A.weight", "blocks.0.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"lora_alpha": 3, "use_rslora": true}`), "blocks.0.attn2.to_k", float32(3 * math.Sqrt(2))},
		{"PEFT default alpha", pairOf("blocks.0.attn2.to_k.lora_A.weight", "blocks.0.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"r": 2}`), "blocks.0.attn2.to_k", 8},
		{"metadata for another component", pairOf("blocks.0.attn2.to_k.lora_A.weight", "blocks.0.attn2.to_k.lora_B.weight", dtype.F32),
			meta(`{"text_encoder.lora_alpha": 5}`), "blocks.0.attn2.to_k", 2},
		{"original Wan lora_down/up with alpha", append(pairOf("diffusion_model.blocks.2.self_attn.o.lora_down.weight", "diffusion_model.blocks.2.self_attn.o.lora_up.weight", dtype.BF16),
			alphaOf("diffusion_model.blocks.2.self_attn.o.alpha", dtype.F32, nil, 1)), nil, "blocks.2.attn1.to_out.0", 1},
		{"original Wan lora_A/B (musubi other)", pairOf("diffusion_model.blocks.2.cross_attn.q.lora_A.weight", "diffusion_model.blocks.2.cross_attn.q.lora_B.weight", dtype.F16), nil,
			"blocks.2.attn2.to_q", 2},
		{"original Wan head", append(pairOf("diffusion_model.head.head.lora_down.weight", "diffusion_model.head.head.lora_up.weight", dtype.F32),
			alphaOf("diffusion_model.head.head.alpha", dtype.BF16, []int{1}, 16)), nil, "proj_out", 16},
		{"kohya with I64 alpha", append(pairOf("lora_unet_blocks_0_ffn_0.lora_down.weight", "lora_unet_blocks_0_ffn_0.lora_up.weight", dtype.BF16),
			alphaOf("lora_unet_blocks_0_ffn_0.alpha", dtype.I64, nil, 2)), nil, "blocks.0.ffn.net.0.proj", 2},
		{"kohya time embedding F64", append(pairOf("lora_unet_time_embedding_0.lora_down.weight", "lora_unet_time_embedding_0.lora_up.weight", dtype.F64),
			alphaOf("lora_unet_time_embedding_0.alpha", dtype.F16, nil, 0.5)),
			meta(`{"lora_alpha": 100}`), "condition_embedder.time_embedder.linear_1", 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ads, err := Read(writeRaw(t, tc.tensors, tc.meta))
			if err != nil {
				t.Fatal(err)
			}
			if len(ads) != 1 {
				t.Fatalf("%d adapters, want 1", len(ads))
			}
			a := ads[0]
			if a.Module != tc.module || a.Rank != 2 || a.In != 3 || a.Out != 4 || a.Alpha != tc.alpha {
				t.Errorf("got %s rank %d in %d out %d alpha %g; want %s rank 2 in 3 out 4 alpha %g",
					a.Module, a.Rank, a.In, a.Out, a.Alpha, tc.module, tc.alpha)
			}
			if !slices.Equal(a.A, f32s(valsA)) || !slices.Equal(a.B, f32s(valsB)) {
				t.Errorf("A %v B %v, want %v %v", a.A, a.B, valsA, valsB)
			}
		})
	}
}

func f32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// TestReadErrors: every refusal is one line naming the file and the
// tensor at fault.
func TestReadErrors(t *testing.T) {
	q := "blocks.0.attn1.to_q"
	meta := func(s string) map[string]string { return map[string]string{metadataKey: s} }
	for _, tc := range []struct {
		name    string
		tensors []raw
		meta    map[string]string
		want    []string // all in the message
	}{
		{"unknown module", pairOf("blocks.0.attn9.to_q.lora_A.weight", "blocks.0.attn9.to_q.lora_B.weight", dtype.F32), nil,
			[]string{"blocks.0.attn9.to_q.lora_", "unknown module"}},
		{"missing B", pairOf(q+".lora_A.weight", "blocks.0.attn1.to_k.lora_B.weight", dtype.F32)[:1], nil,
			[]string{q + ".lora_A.weight", "no lora_B"}},
		{"missing A", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32)[1:], nil,
			[]string{q + ".lora_B.weight", "no lora_A"}},
		{"alpha alone", []raw{alphaOf(q+".alpha", dtype.F32, nil, 4)}, nil, []string{q + ".alpha", "no lora_A/lora_B pair"}},
		{"rank mismatch", []raw{{q + ".lora_A.weight", dtype.F32, []int{2, 3}, valsA}, {q + ".lora_B.weight", dtype.F32, []int{2, 4}, valsB}}, nil,
			[]string{q + ".lora_B.weight", "rank 2"}},
		{"conv LoRA", []raw{{q + ".lora_A.weight", dtype.F32, []int{2, 3, 1}, valsA}, {q + ".lora_B.weight", dtype.F32, []int{4, 2}, valsB}}, nil,
			[]string{q + ".lora_A.weight", "matrix"}},
		{"integer weights", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.I64), nil, []string{q + ".lora_A.weight", "dtype I64"}},
		{"twice", append(pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), raw{"transformer." + q + ".lora_A.weight", dtype.F32, []int{2, 3}, valsA}), nil,
			[]string{"transformer." + q + ".lora_A.weight", "already has"}},
		{"down and A", append(pairOf("diffusion_model.blocks.0.self_attn.q.lora_down.weight", q+".lora_B.weight", dtype.F32), raw{q + ".lora_A.weight", dtype.F32, []int{2, 3}, valsA}), nil,
			[]string{"already has its lora_A"}},
		{"alpha of two values", append(pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), raw{q + ".alpha", dtype.F32, []int{2}, []float64{1, 2}}), nil,
			[]string{q + ".alpha", "one value"}},
		{"NaN weight", []raw{{q + ".lora_A.weight", dtype.F32, []int{2, 3}, []float64{0, 0, math.NaN(), 0, 0, 0}}, {q + ".lora_B.weight", dtype.F32, []int{4, 2}, valsB}}, nil,
			[]string{q + ".lora_A.weight", "NaN"}},
		{"bias of another size", append(pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), raw{q + ".lora_B.bias", dtype.F32, []int{3}, valsB[:3]}), nil,
			[]string{q + ".lora_B.bias", "want [4]"}},
		{"bias twice", append(pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), raw{q + ".lora_B.bias", dtype.F32, []int{4}, valsB[:4]},
			raw{"diffusion_model.blocks.0.self_attn.q.diff_b", dtype.F32, []int{4}, valsB[:4]}), nil, []string{"diff_b"}},
		{"head difference beside a pair", append(pairOf("proj_out.lora_A.weight", "proj_out.lora_B.weight", dtype.F32),
			raw{"diffusion_model.head.head.diff", dtype.F32, []int{4, 3}, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}), nil, []string{"head.head.diff"}},
		{"bad metadata", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), meta("{"), []string{metadataKey, "JSON"}},
		{"metadata alpha is text", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), meta(`{"lora_alpha": "8"}`), []string{metadataKey, "lora_alpha"}},
		{"metadata bad pattern", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), meta(`{"alpha_pattern": {"(": 2}}`), []string{"alpha_pattern", "regular expression"}},
		{"metadata DoRA", pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32), meta(`{"transformer.use_dora": true}`), []string{"DoRA"}},
		{"empty", nil, nil, []string{"no tensors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeRaw(t, tc.tensors, tc.meta)
			_, err := Read(p)
			if err == nil {
				t.Fatal("read without error")
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") || !strings.HasPrefix(msg, p+": ") {
				t.Errorf("error %q is not one line starting with the file", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

func TestReadNotSafetensors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.safetensors")
	os.WriteFile(p, []byte("not a safetensors file"), 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("Read of garbage: %v", err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing.safetensors")); err == nil || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Errorf("Read of a missing file: %v", err)
	}
}

// trainGolden is the wan_train golden case (one copy for every package
// that tests training).
const trainGolden = "../testdata/wan_train"

// TestReadGoldenInit reads the trainer golden's initial LoRA (PEFT names
// without a prefix, rank 4, F32, no alpha): one adapter for every default
// target of the golden model, values as stored.
func TestReadGoldenInit(t *testing.T) {
	path := filepath.Join(trainGolden, "lora_init.safetensors")
	ads, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := wan.ReadConfig(filepath.Join(trainGolden, "model"))
	if err != nil {
		t.Fatal(err)
	}
	names, shapes := cfg.LinearShapes()
	want := Targets(names, DefaultTargets)
	var got []string
	for _, a := range ads {
		got = append(got, a.Module)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("modules %v, want %v", got, want)
	}
	if err := Check(ads, shapes); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, a := range ads {
		if a.Rank != 4 || a.Alpha != 4 || a.Scale() != 1 {
			t.Errorf("%s: rank %d alpha %g, want 4 and 4 (no alpha stored)", a.Module, a.Rank, a.Alpha)
		}
		for _, half := range []struct {
			suffix string
			got    []float32
		}{{".lora_A.weight", a.A}, {".lora_B.weight", a.B}} {
			info, _ := f.Lookup(a.Module + half.suffix)
			v, err := f.ReadF32(info)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(v, half.got) {
				t.Errorf("%s%s differs from the file", a.Module, half.suffix)
			}
		}
	}
}

// TestReadShapes: ReadShapes gives Read's adapters (module, rank, sizes,
// alpha) without the A and B values, and refuses what Read refuses on the
// header; values it does not read (a NaN) are Read's to refuse.
func TestReadShapes(t *testing.T) {
	good := writeRaw(t, append(pairOf("blocks.0.attn1.to_q.lora_A.weight", "blocks.0.attn1.to_q.lora_B.weight", dtype.F32),
		alphaOf("blocks.0.attn1.to_q.alpha", dtype.F32, nil, 3)), nil)
	full, err := Read(good)
	if err != nil {
		t.Fatal(err)
	}
	shapes, err := ReadShapes(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(shapes) != len(full) {
		t.Fatalf("%d adapters from the header, %d from the file", len(shapes), len(full))
	}
	for i, a := range shapes {
		f := full[i]
		if a.A != nil || a.B != nil || a.Module != f.Module || a.Rank != f.Rank || a.In != f.In || a.Out != f.Out || a.Alpha != f.Alpha {
			t.Errorf("header adapter %+v, file adapter %s rank %d %d→%d alpha %g", a, f.Module, f.Rank, f.In, f.Out, f.Alpha)
		}
	}
	bad := writeRaw(t, []raw{{"blocks.0.attn1.to_q.lora_A.weight", dtype.F32, []int{2, 3}, valsA},
		{"blocks.0.attn1.to_q.lora_B.weight", dtype.F32, []int{4, 3}, append(slices.Clone(valsB), 1, 2, 3, 4)}}, nil)
	if _, err := ReadShapes(bad); err == nil {
		t.Error("ReadShapes accepted a lora_B whose rank differs from lora_A's")
	}
	nan := writeRaw(t, []raw{{"blocks.0.attn1.to_q.lora_A.weight", dtype.F32, []int{2, 3}, append([]float64{math.NaN()}, valsA[1:]...)},
		{"blocks.0.attn1.to_q.lora_B.weight", dtype.F32, []int{4, 2}, valsB}}, nil)
	if _, err := ReadShapes(nan); err != nil {
		t.Errorf("ReadShapes read values: %v", err)
	}
	if _, err := Read(nan); err == nil {
		t.Error("Read accepted a NaN in lora_A")
	}
}
