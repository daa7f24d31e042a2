package wan

import (
	"fmt"
	"math"
	"testing"

	"ferry/model/modeltest"
	"ferry/tensor"
)

// refForward is refForwardInputs with one timestep per sample and no
// image.
func refForward(cfg Config, w map[string][]float32, x []float32, xs []int, ts []float32, ctx []float32, lt int) []float64 {
	return refForwardInputs(cfg, w, x, xs, refInputs{ts: ts, ctx: ctx, lt: lt})
}

// refInputs are refForwardInputs' conditions: ts (one per sample) or tokTS
// (one per token, [B, L] row-major), the text context [B, lt, text_dim],
// and for image-conditioned configs the image embeddings img in the
// layout Inputs.Image describes (sample b's imgRows rows start at row
// b·imgRows of the flat array in both layouts).
type refInputs struct {
	ts, tokTS []float32
	ctx       []float32
	lt        int
	img       []float32
	imgRows   int
}

// refForwardInputs is an independent float64 transcription of diffusers'
// WanTransformer3DModel.forward over host weights, written loop by loop
// (the patch embedding as a strided convolution, the unpatchify as index
// arithmetic, RoPE from the reference's concatenated tables, every token's
// own time embedding and modulation with per-token timesteps, the image
// tokens concatenated before the text and split at length−512 as the
// attention processor does) so that it shares nothing with the Ops code
// under test but the config.
func refForwardInputs(cfg Config, w map[string][]float32, x []float32, xs []int, in refInputs) []float64 {
	bN, ch := xs[0], xs[1]
	ps := cfg.PatchSize
	n := [3]int{xs[2] / ps[0], xs[3] / ps[1], xs[4] / ps[2]}
	tokens, dim, hd := n[0]*n[1]*n[2], cfg.InnerDim(), cfg.AttentionHeadDim
	eps := cfg.Eps
	ropeCos, ropeSin := refRope(cfg, n)
	out := make([]float64, bN*cfg.OutChannels*xs[2]*xs[3]*xs[4])

	for b := range bN {
		// Patch embedding: Conv3d with kernel = stride = patch.
		h := make([][]float64, tokens)
		for l := range h {
			f, r, c := l/(n[1]*n[2]), l/n[2]%n[1], l%n[2]
			h[l] = make([]float64, dim)
			for o := range dim {
				s := float64(w["patch_embedding.bias"][o])
				for ci := range ch {
					for i := range ps[0] {
						for j := range ps[1] {
							for k := range ps[2] {
								wi := (((o*ch+ci)*ps[0]+i)*ps[1]+j)*ps[2] + k
								xi := (((b*ch+ci)*xs[2]+f*ps[0]+i)*xs[3]+r*ps[1]+j)*xs[4] + c*ps[2] + k
								s += float64(w["patch_embedding.weight"][wi]) * float64(x[xi])
							}
						}
					}
				}
				h[l][o] = s
			}
		}

		// Condition embedder: the time embedding and its projection of the
		// sample's timestep, or of every token's own.
		e := "condition_embedder."
		temb, tproj := make([][]float64, tokens), make([][]float64, tokens)
		for l := range tokens {
			switch {
			case in.tokTS != nil:
				temb[l], tproj[l] = refTimeEmbed(cfg, w, float64(in.tokTS[b*tokens+l]))
			case l == 0:
				temb[l], tproj[l] = refTimeEmbed(cfg, w, float64(in.ts[b]))
			default:
				temb[l], tproj[l] = temb[0], tproj[0]
			}
		}
		text := make([][]float64, in.lt)
		for i := range text {
			row := make([]float64, cfg.TextDim)
			for j := range row {
				row[j] = float64(in.ctx[(b*in.lt+i)*cfg.TextDim+j])
			}
			text[i] = refLin(w, e+"text_embedder.linear_2", refMap(refLin(w, e+"text_embedder.linear_1", row), refGELUTanh))
		}
		// encoder_hidden_states = concat([image_embedder(image), text]);
		// attn2 takes all[:s] and all[s:] with s = len(all) − 512 under
		// Python's rules: a negative s counts from the end, clamped at 0.
		var imgCtx [][]float64
		if cfg.HasImage() {
			all := append(refImageEmbed(cfg, w, in.img, b, in.imgRows), text...)
			split := len(all) - 512
			if split < 0 {
				split = max(0, len(all)+split)
			}
			imgCtx, text = all[:split], all[split:]
		}

		for li := range cfg.NumLayers {
			p := fmt.Sprintf("blocks.%d.", li)
			// mod[l][k]: shift, scale, gate, c_shift, c_scale, c_gate of token l.
			mod := make([][][]float64, tokens)
			for l := range mod {
				mod[l] = make([][]float64, 6)
				for k := range mod[l] {
					mod[l][k] = make([]float64, dim)
					for j := range dim {
						mod[l][k][j] = float64(w[p+"scale_shift_table"][k*dim+j]) + tproj[l][k*dim+j]
					}
				}
			}
			// Self-attention.
			q, k, v := make([][]float64, tokens), make([][]float64, tokens), make([][]float64, tokens)
			for l := range h {
				xm := refModulate(refLayerNorm(h[l], nil, nil, eps), mod[l][1], mod[l][0])
				q[l] = refRMS(refLin(w, p+"attn1.to_q", xm), w[p+"attn1.norm_q.weight"], eps)
				k[l] = refRMS(refLin(w, p+"attn1.to_k", xm), w[p+"attn1.norm_k.weight"], eps)
				v[l] = refLin(w, p+"attn1.to_v", xm)
				for head := range cfg.NumAttentionHeads {
					refRotate(q[l][head*hd:(head+1)*hd], ropeCos[l], ropeSin[l])
					refRotate(k[l][head*hd:(head+1)*hd], ropeCos[l], ropeSin[l])
				}
			}
			att := refAttention(q, k, v, cfg.NumAttentionHeads, hd)
			for l := range h {
				o := refLin(w, p+"attn1.to_out.0", att[l])
				for j := range dim {
					h[l][j] += o[j] * mod[l][2][j]
				}
			}
			// Cross-attention, plus the image attention.
			kc, vc := make([][]float64, len(text)), make([][]float64, len(text))
			for i := range text {
				kc[i] = refRMS(refLin(w, p+"attn2.to_k", text[i]), w[p+"attn2.norm_k.weight"], eps)
				vc[i] = refLin(w, p+"attn2.to_v", text[i])
			}
			qc := make([][]float64, tokens)
			for l := range h {
				xn := h[l]
				if cfg.CrossAttnNorm {
					xn = refLayerNorm(h[l], w[p+"norm2.weight"], w[p+"norm2.bias"], eps)
				}
				qc[l] = refRMS(refLin(w, p+"attn2.to_q", xn), w[p+"attn2.norm_q.weight"], eps)
			}
			att = refAttention(qc, kc, vc, cfg.NumAttentionHeads, hd)
			// PyTorch's attention over no keys (an empty image part)
			// gives zeros: its CPU kernels leave empty sequences to the
			// math path, a product over an empty inner dimension.
			if len(imgCtx) > 0 {
				ki, vi := make([][]float64, len(imgCtx)), make([][]float64, len(imgCtx))
				for i := range imgCtx {
					ki[i] = refRMS(refLin(w, p+"attn2.add_k_proj", imgCtx[i]), w[p+"attn2.norm_added_k.weight"], eps)
					vi[i] = refLin(w, p+"attn2.add_v_proj", imgCtx[i])
				}
				attImg := refAttention(qc, ki, vi, cfg.NumAttentionHeads, hd)
				for l := range att {
					for j := range att[l] {
						att[l][j] += attImg[l][j]
					}
				}
			}
			for l := range h {
				o := refLin(w, p+"attn2.to_out.0", att[l])
				for j := range dim {
					h[l][j] += o[j]
				}
			}
			// Feed-forward.
			for l := range h {
				xm := refModulate(refLayerNorm(h[l], nil, nil, eps), mod[l][4], mod[l][3])
				y := refLin(w, p+"ffn.net.2", refMap(refLin(w, p+"ffn.net.0.proj", xm), refGELUTanh))
				for j := range dim {
					h[l][j] += y[j] * mod[l][5][j]
				}
			}
		}

		// Output norm (shift and scale from each token's temb), projection,
		// unpatchify.
		for l := range h {
			shift, scale := make([]float64, dim), make([]float64, dim)
			for j := range dim {
				shift[j] = float64(w["scale_shift_table"][j]) + temb[l][j]
				scale[j] = float64(w["scale_shift_table"][dim+j]) + temb[l][j]
			}
			y := refLin(w, "proj_out", refModulate(refLayerNorm(h[l], nil, nil, eps), scale, shift))
			f, r, c := l/(n[1]*n[2]), l/n[2]%n[1], l%n[2]
			for i := range ps[0] {
				for j := range ps[1] {
					for k := range ps[2] {
						for co := range cfg.OutChannels {
							oi := (((b*cfg.OutChannels+co)*xs[2]+f*ps[0]+i)*xs[3]+r*ps[1]+j)*xs[4] + c*ps[2] + k
							out[oi] = y[((i*ps[1]+j)*ps[2]+k)*cfg.OutChannels+co]
						}
					}
				}
			}
		}
	}
	return out
}

// refTimeEmbed is WanTimeTextImageEmbedding's time part for one timestep:
// temb = time_embedder(sinusoid(t)) and time_proj(silu(temb)).
func refTimeEmbed(cfg Config, w map[string][]float32, t float64) (temb, tproj []float64) {
	half := cfg.FreqDim / 2
	sinus := make([]float64, cfg.FreqDim)
	for i := range half {
		arg := t * math.Exp(-math.Log(10000)*float64(i)/float64(half))
		sinus[i], sinus[half+i] = math.Cos(arg), math.Sin(arg)
	}
	e := "condition_embedder."
	temb = refLin(w, e+"time_embedder.linear_2", refMap(refLin(w, e+"time_embedder.linear_1", sinus), refSiLU))
	tproj = refLin(w, e+"time_proj", refMap(append([]float64(nil), temb...), refSiLU))
	return temb, tproj
}

// refImageEmbed is WanImageEmbedding on sample b's rows of img: plus the
// position embedding (FLF2V), LayerNorm (eps 1e-5), Linear, exact GELU,
// Linear, LayerNorm (eps 1e-5).
func refImageEmbed(cfg Config, w map[string][]float32, img []float32, b, rows int) [][]float64 {
	e, width := "condition_embedder.image_embedder.", *cfg.ImageDim
	out := make([][]float64, rows)
	for r := range out {
		x := make([]float64, width)
		for j := range x {
			x[j] = float64(img[(b*rows+r)*width+j])
			if pos, ok := w[e+"pos_embed"]; ok {
				x[j] += float64(pos[r*width+j])
			}
		}
		y := refLin(w, e+"ff.net.2", refMap(refLin(w, e+"ff.net.0.proj", refLayerNorm(x, w[e+"norm1.weight"], w[e+"norm1.bias"], 1e-5)), refGELUErf))
		out[r] = refLayerNorm(y, w[e+"norm2.weight"], w[e+"norm2.bias"], 1e-5)
	}
	return out
}

// refRope builds WanRotaryPosEmbed's [L][D] cos and sin as diffusers
// 0.40.0 does: per-axis tables of widths t, h, w = D−2·2⌊D/6⌋, 2⌊D/6⌋,
// 2⌊D/6⌋ concatenated by column at construction, split again at the same
// widths (self.t_dim, self.h_dim, self.w_dim) and indexed by frame, row,
// column.
func refRope(cfg Config, n [3]int) (cos, sin [][]float64) {
	d := cfg.AttentionHeadDim
	hw := 2 * (d / 6)
	maxPos := max(n[0], n[1], n[2])
	initCos, initSin := make([][]float64, maxPos), make([][]float64, maxPos)
	for pos := range maxPos {
		for _, width := range []int{d - 2*hw, hw, hw} {
			for i := range width / 2 {
				a := float64(pos) / math.Pow(10000, float64(2*i)/float64(width))
				initCos[pos] = append(initCos[pos], math.Cos(a), math.Cos(a))
				initSin[pos] = append(initSin[pos], math.Sin(a), math.Sin(a))
			}
		}
	}
	split := []int{d - 2*hw, hw, hw}
	for f := range n[0] {
		for r := range n[1] {
			for c := range n[2] {
				pos := []int{f, r, c}
				rc, rs := make([]float64, d), make([]float64, d)
				col := 0
				for a, width := range split {
					for range width {
						rc[col], rs[col] = initCos[pos[a]][col], initSin[pos[a]][col]
						col++
					}
				}
				cos, sin = append(cos, rc), append(sin, rs)
			}
		}
	}
	return cos, sin
}

// refRotate is apply_rotary_emb on one head: pair j turns by cos[2j] and
// sin[2j+1].
func refRotate(x, cos, sin []float64) {
	for j := 0; j < len(x); j += 2 {
		x1, x2 := x[j], x[j+1]
		x[j] = x1*cos[j] - x2*sin[j+1]
		x[j+1] = x1*sin[j+1] + x2*cos[j]
	}
}

func refAttention(q, k, v [][]float64, heads, hd int) [][]float64 {
	out := make([][]float64, len(q))
	for i := range q {
		out[i] = make([]float64, heads*hd)
		for h := range heads {
			s := make([]float64, len(k))
			top := math.Inf(-1)
			for j := range k {
				for c := range hd {
					s[j] += q[i][h*hd+c] * k[j][h*hd+c]
				}
				s[j] /= math.Sqrt(float64(hd))
				top = math.Max(top, s[j])
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - top)
				sum += s[j]
			}
			for j := range s {
				for c := range hd {
					out[i][h*hd+c] += s[j] / sum * v[j][h*hd+c]
				}
			}
		}
	}
	return out
}

func refLin(w map[string][]float32, name string, x []float64) []float64 {
	wt, bias := w[name+".weight"], w[name+".bias"]
	out := make([]float64, len(bias))
	for o := range out {
		s := float64(bias[o])
		for i, xi := range x {
			s += float64(wt[o*len(x)+i]) * xi
		}
		out[o] = s
	}
	return out
}

func refLayerNorm(x []float64, wt, bias []float32, eps float64) []float64 {
	mean, vr := 0.0, 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		vr += (v - mean) * (v - mean)
	}
	vr /= float64(len(x))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = (v - mean) / math.Sqrt(vr+eps)
		if wt != nil {
			out[i] = out[i]*float64(wt[i]) + float64(bias[i])
		}
	}
	return out
}

func refRMS(x []float64, wt []float32, eps float64) []float64 {
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	r := 1 / math.Sqrt(ms/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r * float64(wt[i])
	}
	return out
}

func refModulate(x, scale, shift []float64) []float64 {
	for i := range x {
		x[i] = x[i]*(1+scale[i]) + shift[i]
	}
	return x
}

// refMap applies f to x in place.
func refMap(x []float64, f func(float64) float64) []float64 {
	for i := range x {
		x[i] = f(x[i])
	}
	return x
}

func refSiLU(x float64) float64 { return x / (1 + math.Exp(-x)) }

func refGELUErf(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func refGELUTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// TestForwardMatchesReference covers what the goldens do not: real head
// width 128 (RoPE split 44/42/42), a head width whose two RoPE splits
// split differently in older diffusers, a temporal patch, no cross-attention norm, several output
// channels per patch. Tolerance: the goldens' 1e-4.
func TestForwardMatchesReference(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(c *Config)
		latent []int // B, C, F, H, W
		lt     int
	}{
		{"golden sizes", func(c *Config) {}, []int{2, 16, 3, 6, 8}, 12},
		{"head 128, patch (2,1,2), no norm2", func(c *Config) {
			c.NumAttentionHeads, c.AttentionHeadDim = 1, 128
			c.PatchSize, c.CrossAttnNorm, c.InChannels, c.OutChannels = [3]int{2, 1, 2}, false, 4, 3
		}, []int{2, 4, 4, 3, 4}, 5},
		{"head 10: older diffusers split RoPE 4/3/3", func(c *Config) {
			c.NumAttentionHeads, c.AttentionHeadDim, c.NumLayers = 3, 10, 1
		}, []int{1, 16, 2, 4, 6}, 7},
		{"head 16, 5 heads, patch (2,1,2): older split 6/5/5", func(c *Config) {
			c.NumAttentionHeads, c.AttentionHeadDim, c.NumLayers = 5, 16, 1
			c.PatchSize = [3]int{2, 1, 2}
		}, []int{2, 16, 4, 3, 4}, 6},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tinyConfig()
			tt.edit(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			src := synthesize(cfg, uint64(10+i))
			x := modeltest.Randn(uint64(20+i), tensor.NumElems(tt.latent))
			ctx := modeltest.Randn(uint64(30+i), tt.latent[0]*tt.lt*cfg.TextDim)
			ts := []float32{981, 17.25}[:tt.latent[0]]

			r := newRig(t)
			m := r.model(t, cfg, src)
			got := r.forward(t, m, x, tt.latent, ts, ctx, []int{tt.latent[0], tt.lt, cfg.TextDim})
			ref := refForward(cfg, src.Tensors(), x, tt.latent, ts, ctx, tt.lt)
			want := make([]float32, len(ref))
			for i, v := range ref {
				want[i] = float32(v)
			}
			worst := modeltest.Compare(t, "sample", got, want, atol, rtol)
			t.Logf("max abs error %.3g (absmax %.3g)", worst, absMax(want))
		})
	}
}

// TestReferenceMatchesGolden checks the float64 transcription itself
// against the golden output, so that agreeing with it means something.
func TestReferenceMatchesGolden(t *testing.T) {
	g := loadGolden(t, "wan_transformer")
	x, xs := modeltest.TensorOf(t, g.inputs, "hidden_states")
	ts, _ := modeltest.TensorOf(t, g.inputs, "timestep")
	ctx, cs := modeltest.TensorOf(t, g.inputs, "encoder_hidden_states")
	want, _ := modeltest.TensorOf(t, g.outputs, "sample")
	w := map[string][]float32{}
	for _, n := range g.weights.Names() {
		w[n], _ = modeltest.TensorOf(t, g.weights, n)
	}
	ref := refForward(g.cfg, w, x, xs, ts, ctx, cs[1])
	got := make([]float32, len(ref))
	for i, v := range ref {
		got[i] = float32(v)
	}
	t.Logf("max abs error %.3g", modeltest.Compare(t, "reference", got, want, atol, rtol))
}
