package wanvae

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// lazySource is a synthetic float32 checkpoint whose values are computed
// from the tensor name and element index when read, so that the real
// architecture's weights never sit in host memory: gammas are 1, the rest
// uniform with variance 1/fan_in.
type lazySource map[string][]int

func newLazySource(ps []residency.ParamSpec) lazySource {
	s := lazySource{}
	for _, p := range ps {
		s[p.Name] = p.Shape
	}
	return s
}

func (s lazySource) Info(name string) (residency.TensorInfo, bool) {
	shape, ok := s[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.F32, Shape: shape, Size: int64(4 * tensor.NumElems(shape))}, true
}

func (s lazySource) Read(name string, off int64, dst []byte) error {
	shape, ok := s[name]
	if !ok || off%4 != 0 || len(dst)%4 != 0 {
		return fmt.Errorf("read %s at %d: bad request", name, off)
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	seed := h.Sum64()
	scale := 0.0
	if !strings.HasSuffix(name, ".gamma") && len(shape) >= 2 {
		scale = math.Sqrt(3 / float64(tensor.NumElems(shape)/shape[0]))
	}
	for i := range len(dst) / 4 {
		v := float32(1)
		if !strings.HasSuffix(name, ".gamma") {
			x := (seed ^ uint64(off/4+int64(i))) * 0x9E3779B97F4A7C15
			x ^= x >> 29
			u := float64(x>>11)/(1<<53)*2 - 1
			v = float32(u * max(scale, 0.01))
		}
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

func (s lazySource) Drop(string) {}

// BenchmarkDecodeWan21 decodes latents with the real Wan 2.1 decoder
// (synthetic weights, all resident) and reports seconds per latent frame,
// the peak device bytes of activations (output included) and the weights.
func BenchmarkDecodeWan21(b *testing.B) {
	for _, bc := range []struct {
		t, h, w int
		tile    int // square tile in pixels, 0: untiled
	}{{2, 16, 16, 0}, {3, 8, 8, 0}, {3, 16, 16, 0}, {3, 16, 16, 64}} {
		name := fmt.Sprintf("T%d_%dx%d", bc.t, bc.h, bc.w)
		if bc.tile > 0 {
			name += fmt.Sprintf("_tile%d", bc.tile)
		}
		b.Run(name, func(b *testing.B) {
			cfg := ConfigWan21()
			r := newRig(b, gemm.Best(), nil)
			m := New(cfg)
			m.Options.Tiling = SquareTiling(bc.tile, 0)
			if err := r.ex.Register(m.DecoderComponent("vae", newLazySource(cfg.DecoderParams()))); err != nil {
				b.Fatal(err)
			}
			shape := []int{1, cfg.ZDim, bc.t, bc.h, bc.w}
			z := modeltest.Randn(1, tensor.NumElems(shape))
			r.decode(b, m, z, shape) // loads the weights
			weights := r.dev.Stats().Allocated
			var live liveBytes
			r.dev.Observe(live.observe)
			b.ResetTimer()
			for b.Loop() {
				r.decode(b, m, z, shape)
			}
			b.StopTimer()
			r.dev.Observe(nil)
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(bc.t), "s/latent-frame")
			b.ReportMetric(float64(live.peakA)/(1<<20), "MiB-activations")
			b.ReportMetric(float64(weights)/(1<<20), "MiB-weights")
		})
	}
}

// BenchmarkFirstFrame decodes one latent frame (an image) with the real
// decoder, with the first-chunk shortcut (only the last temporal tap of
// each causal conv) and with the padded convolutions it replaces. Run with
// -count to interleave the two.
func BenchmarkFirstFrame(b *testing.B) {
	cfg := ConfigWan21()
	r := newRig(b, gemm.Best(), nil)
	m := New(cfg)
	if err := r.ex.Register(m.DecoderComponent("vae", newLazySource(cfg.DecoderParams()))); err != nil {
		b.Fatal(err)
	}
	shape := []int{1, cfg.ZDim, 1, 16, 16}
	z := modeltest.Randn(1, tensor.NumElems(shape))
	r.decode(b, m, z, shape) // loads the weights
	for _, shortcut := range []bool{true, false} {
		name := "last-tap"
		if !shortcut {
			name = "padded"
		}
		b.Run(name, func(b *testing.B) {
			lastTapShortcut = shortcut
			defer func() { lastTapShortcut = true }()
			for b.Loop() {
				r.decode(b, m, z, shape)
			}
		})
	}
}
