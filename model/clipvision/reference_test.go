package clipvision

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
)

// refModel is the tower in float64, written from the reference's module
// structure, over the same weights.
type refModel struct {
	c Config
	w map[string][]float64
}

func newRef(c Config, src *residencytest.MemSource) *refModel {
	r := &refModel{c: c, w: map[string][]float64{}}
	for name, d := range src.Tensors() {
		v := make([]float64, len(d))
		for i, x := range d {
			v[i] = float64(x)
		}
		r.w[name] = v
	}
	return r
}

// hidden returns hidden_states[-2] for one image [C, S, S].
func (r *refModel) hidden(px []float32) [][]float64 {
	c := r.c
	d, p, g := c.HiddenSize, c.PatchSize, c.ImageSize/c.PatchSize
	patch, pos := r.w[embedPrefix+"patch_embedding.weight"], r.w[embedPrefix+"position_embedding.weight"]
	x := make([][]float64, c.Tokens())
	x[0] = append([]float64(nil), r.w[embedPrefix+"class_embedding"]...)
	for gy := range g {
		for gx := range g {
			row := make([]float64, d)
			for o := range d {
				for ch := range c.NumChannels {
					for ky := range p {
						for kx := range p {
							wi := ((o*c.NumChannels+ch)*p+ky)*p + kx
							pi := (ch*c.ImageSize+gy*p+ky)*c.ImageSize + gx*p + kx
							row[o] += patch[wi] * float64(px[pi])
						}
					}
				}
			}
			x[1+gy*g+gx] = row
		}
	}
	for t := range x {
		for j := range d {
			x[t][j] += pos[t*d+j]
		}
		x[t] = r.layerNorm(x[t], root+"pre_layrnorm")
	}
	for i := range c.NumHiddenLayers - 1 {
		r.layer(x, layerPrefix(i))
	}
	return x
}

func (r *refModel) layerNorm(v []float64, name string) []float64 {
	mean, vr := 0.0, 0.0
	for _, a := range v {
		mean += a
	}
	mean /= float64(len(v))
	for _, a := range v {
		vr += (a - mean) * (a - mean)
	}
	vr /= float64(len(v))
	w, b := r.w[name+".weight"], r.w[name+".bias"]
	out := make([]float64, len(v))
	for i, a := range v {
		out[i] = (a-mean)/math.Sqrt(vr+r.c.LayerNormEps)*w[i] + b[i]
	}
	return out
}

func (r *refModel) linear(v []float64, name string) []float64 {
	w, b := r.w[name+".weight"], r.w[name+".bias"]
	out := make([]float64, len(b))
	for o := range out {
		s := b[o]
		for i, a := range v {
			s += w[o*len(v)+i] * a
		}
		out[o] = s
	}
	return out
}

func (r *refModel) act(x float64) float64 {
	switch r.c.HiddenAct {
	case "gelu":
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case "quick_gelu":
		return x / (1 + math.Exp(-1.702*x))
	}
	panic("reference: activation " + r.c.HiddenAct)
}

// layer is CLIPEncoderLayer on x in place.
func (r *refModel) layer(x [][]float64, pre string) {
	c := r.c
	n, heads, hd := len(x), c.NumAttentionHeads, c.HeadDim()
	q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
	for t := range x {
		h := r.layerNorm(x[t], pre+"layer_norm1")
		q[t], k[t], v[t] = r.linear(h, pre+"self_attn.q_proj"), r.linear(h, pre+"self_attn.k_proj"), r.linear(h, pre+"self_attn.v_proj")
	}
	att := make([][]float64, n)
	for t := range n {
		att[t] = make([]float64, c.HiddenSize)
		for hh := range heads {
			lo := hh * hd
			scores := make([]float64, n)
			top := math.Inf(-1)
			for s := range n {
				for j := range hd {
					scores[s] += q[t][lo+j] * k[s][lo+j]
				}
				scores[s] /= math.Sqrt(float64(hd))
				top = math.Max(top, scores[s])
			}
			sum := 0.0
			for s := range scores {
				scores[s] = math.Exp(scores[s] - top)
				sum += scores[s]
			}
			for s := range n {
				for j := range hd {
					att[t][lo+j] += scores[s] / sum * v[s][lo+j]
				}
			}
		}
	}
	for t := range x {
		o := r.linear(att[t], pre+"self_attn.out_proj")
		for j := range o {
			x[t][j] += o[j]
		}
	}
	for t := range x {
		f := r.linear(r.layerNorm(x[t], pre+"layer_norm2"), pre+"mlp.fc1")
		for j := range f {
			f[j] = r.act(f[j])
		}
		o := r.linear(f, pre+"mlp.fc2")
		for j := range o {
			x[t][j] += o[j]
		}
	}
}

// refBatch runs the reference image by image and flattens [B, T, D].
func (r *refModel) refBatch(px []float32, batch int) []float32 {
	per := len(px) / batch
	var out []float32
	for b := range batch {
		for _, row := range r.hidden(px[b*per : (b+1)*per]) {
			for _, v := range row {
				out = append(out, float32(v))
			}
		}
	}
	return out
}

// tinyJSON is a tower of width 12 (3 heads of 4), MLP 20, image 10 with
// patch 3 (the conv ignores the last row and column: 9 patches).
func tinyJSON(act string, layers int) string {
	return fmt.Sprintf(`{"model_type":"clip_vision_model","hidden_size":12,"intermediate_size":20,"num_hidden_layers":%d,"num_attention_heads":3,"num_channels":3,"image_size":10,"patch_size":3,"hidden_act":%q,"layer_norm_eps":1e-5}`, layers, act)
}

// TestEncodeMatchesReference compares Encode with the float64 reference
// for both activations, one layer (hidden_states[-2] is then the
// embeddings) and several, batch 1 and 2.
func TestEncodeMatchesReference(t *testing.T) {
	for _, tt := range []struct {
		act           string
		layers, batch int
	}{
		{"gelu", 3, 2},
		{"quick_gelu", 3, 1},
		{"gelu", 1, 2},
	} {
		t.Run(fmt.Sprintf("%s_%dlayers_batch%d", tt.act, tt.layers, tt.batch), func(t *testing.T) {
			cfg := tinyConfig(t, tinyJSON(tt.act, tt.layers))
			src := synthesize(cfg, 3)
			px := modeltest.Randn(5, tt.batch*3*10*10)
			want := newRef(cfg, src).refBatch(px, tt.batch)
			r := newRig(t, nil, gemm.Naive{})
			got := r.encode(t, r.tower(t, cfg, src), px, tt.batch)
			worst := modeltest.Compare(t, "hidden_states[-2]", got, want, 1e-5, 1e-5)
			t.Logf("max abs error vs float64 reference: %.3g", worst)
		})
	}
}

// TestEncodeStreamed runs the tower block by block from "disk" with a
// prefetch of 1: the result must be the resident one bit for bit, the
// skipped last layer must never be read, and the device must end where it
// started.
func TestEncodeStreamed(t *testing.T) {
	cfg := tinyConfig(t, tinyJSON("gelu", 4))
	src := synthesize(cfg, 9)
	px := modeltest.Randn(4, 3*10*10)

	resident := newRig(t, nil, gemm.Naive{})
	want := resident.encode(t, resident.tower(t, cfg, src), px, 1)

	// Without the last layer and post_layernorm the tower must still run.
	for _, p := range cfg.Params() {
		if p.Block == postBlock || p.Block == layerBlock(cfg.NumHiddenLayers-1) {
			src.Delete(p.Name)
		}
	}
	plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1}, component)
	streamed := newRig(t, plan, gemm.Naive{})
	m := streamed.tower(t, cfg, src)
	before := streamed.Dev.Stats().Allocated
	for range 2 { // twice: the prefetch wraps around to the embeddings
		modeltest.Compare(t, "streamed", streamed.encode(t, m, px, 1), want, 0, 0)
	}
	streamed.Ex.Done(component)
	if after := streamed.Dev.Stats().Allocated; after != before {
		t.Errorf("device allocated %d bytes after streaming, %d before", after, before)
	}
}

func TestEncodeErrors(t *testing.T) {
	cfg := tinyConfig(t, tinyJSON("gelu", 2))
	src := synthesize(cfg, 1)
	r := newRig(t, nil, gemm.Naive{})
	ops := r.Ex.Ops(component)
	if _, err := New(cfg).Encode(r.Ex, ops, make([]float32, 300), 1); err == nil || !strings.Contains(err.Error(), "Component") {
		t.Errorf("Encode before Component: %v", err)
	}
	m := r.tower(t, cfg, src)
	for _, c := range []struct {
		n, batch int
		mention  string
	}{
		{300, 0, "batch"},
		{299, 1, "pixel values"},
		{300, 2, "pixel values"},
	} {
		if _, err := m.Encode(r.Ex, ops, make([]float32, c.n), c.batch); err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%d values, batch %d: error %v, want one mentioning %q", c.n, c.batch, err, c.mention)
		}
	}
	// A misshapen weight is caught by CheckSource before any pass.
	bad := synthesize(cfg, 1)
	bad.Put(layerPrefix(0)+"mlp.fc1.weight", []int{21, 12}, make([]float32, 21*12))
	if err := cfg.CheckSource(bad); err == nil || !strings.Contains(err.Error(), "mlp.fc1.weight") {
		t.Errorf("CheckSource on a misshapen fc1: %v", err)
	}
	bad.Delete(root + "pre_layrnorm.bias")
	if err := cfg.CheckSource(bad); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("CheckSource without pre_layrnorm.bias: %v", err)
	}
}
