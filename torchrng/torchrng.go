// Package torchrng reproduces PyTorch's CPU random number generator, so that
// a seed gives the noise diffusers and ComfyUI draw from it:
// torch.Generator().manual_seed(s) (or torch.manual_seed(s)) followed by
// torch.randn(shape, generator=g, dtype=torch.float32) on the CPU, which is
// how both make a video's initial latents.
//
// The engine is the 32-bit Mersenne Twister (MT19937) seeded with the low
// 32 bits of the seed, as ATen's at::mt19937 is. Uniform floats take the low
// 24 bits of one draw, uniform doubles the low 53 bits of two. Normal
// samples follow ATen's two layouts: tensors of 16 or more float32 values
// are filled with uniforms first and transformed sixteen at a time by
// Box-Muller (cosines into the first eight, sines into the next eight, the
// last sixteen redrawn when the size is no multiple of 16); smaller tensors
// take one double-precision Box-Muller draw per value, caching the sine.
//
// Values agree with PyTorch to within a few float32 ulps: ATen's float
// Box-Muller calls the C library's logf, cosf and sinf (or, on CPUs where it
// runs its AVX2 kernels, a vectorised approximation of them), and this
// package computes them in float64 and rounds.
package torchrng

import "math"

const (
	stateN = 624
	stateM = 397
)

// Generator is one torch.Generator on the CPU. It is not safe for
// concurrent use.
type Generator struct {
	state [stateN]uint32
	next  int
	// normal is the cached second value of a double-precision Box-Muller
	// draw (ATen's next_double_normal_sample).
	normal    float64
	hasNormal bool
}

// New returns a generator seeded as torch.Generator().manual_seed(seed).
func New(seed uint64) *Generator {
	g := &Generator{}
	g.Seed(seed)
	return g
}

// Seed resets the generator as manual_seed does: the engine restarts from
// the low 32 bits of seed and the cached normal sample is dropped.
func (g *Generator) Seed(seed uint64) {
	g.state[0] = uint32(seed)
	for j := 1; j < stateN; j++ {
		prev := g.state[j-1]
		g.state[j] = 1812433253*(prev^prev>>30) + uint32(j)
	}
	g.next = stateN
	g.hasNormal = false
}

// Uint32 returns the engine's next 32-bit output (ATen's random()).
func (g *Generator) Uint32() uint32 {
	if g.next >= stateN {
		g.twist()
	}
	y := g.state[g.next]
	g.next++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// twist regenerates the state block.
func (g *Generator) twist() {
	const upper, lower, matrixA = 0x80000000, 0x7fffffff, 0x9908b0df
	for i := range stateN {
		y := g.state[i]&upper | g.state[(i+1)%stateN]&lower
		v := g.state[(i+stateM)%stateN] ^ y>>1
		if y&1 != 0 {
			v ^= matrixA
		}
		g.state[i] = v
	}
	g.next = 0
}

// Uint64 returns two draws joined, the first in the high half (ATen's
// random64()).
func (g *Generator) Uint64() uint64 {
	hi := g.Uint32()
	lo := g.Uint32()
	return uint64(hi)<<32 | uint64(lo)
}

// Float32 returns a uniform float in [0, 1) from the low 24 bits of one
// draw (uniform_real_distribution<float>(0, 1)).
func (g *Generator) Float32() float32 {
	return float32(float64(g.Uint32()&(1<<24-1)) / (1 << 24))
}

// Float64 returns a uniform double in [0, 1) from the low 53 bits of two
// draws (uniform_real_distribution<double>(0, 1)).
func (g *Generator) Float64() float64 {
	return float64(g.Uint64()&(1<<53-1)) / (1 << 53)
}

// Rand fills dst as torch.rand(n, generator=g) does for float32.
func (g *Generator) Rand(dst []float32) {
	for i := range dst {
		dst[i] = g.Float32()
	}
}

// Randn fills dst with standard-normal float32 values as torch.randn(n,
// generator=g, dtype=torch.float32) does on the CPU for a contiguous
// tensor of len(dst) values (the shape does not matter, only the count).
func (g *Generator) Randn(dst []float32) {
	n := len(dst)
	if n < 16 {
		for i := range dst {
			dst[i] = float32(g.normal64())
		}
		return
	}
	g.Rand(dst)
	for i := 0; i+16 <= n; i += 16 {
		boxMuller16(dst[i : i+16])
	}
	if n%16 != 0 {
		tail := dst[n-16:]
		g.Rand(tail)
		boxMuller16(tail)
	}
}

// boxMuller16 turns sixteen uniforms into normals in place, in float32 as
// ATen's normal_fill_16: u1 = 1 - x[j], u2 = x[j+8], radius =
// sqrt(-2·log u1), theta = 2π·u2, x[j] = radius·cos theta, x[j+8] =
// radius·sin theta.
func boxMuller16(x []float32) {
	const twoPi = 2 * math.Pi // 2.0f * c10::pi<double>, a double
	for j := range 8 {
		u1 := 1 - x[j]
		u2 := x[j+8]
		radius := sqrt32(-2 * log32(u1))
		theta := float32(twoPi * float64(u2))
		x[j] = radius * cos32(theta)
		x[j+8] = radius * sin32(theta)
	}
}

// normal64 is ATen's normal_distribution<double>(0, 1): a Box-Muller pair
// from two uniform doubles, the cosine returned and the sine kept for the
// next call.
func (g *Generator) normal64() float64 {
	if g.hasNormal {
		g.hasNormal = false
		return g.normal
	}
	u1 := g.Float64()
	u2 := g.Float64()
	r := math.Sqrt(-2 * math.Log1p(-u2))
	theta := 2 * math.Pi * u1
	g.normal, g.hasNormal = r*math.Sin(theta), true
	return r * math.Cos(theta)
}

// The float32 functions of the C library, correctly rounded.
func log32(x float32) float32  { return float32(math.Log(float64(x))) }
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
func cos32(x float32) float32  { return float32(math.Cos(float64(x))) }
func sin32(x float32) float32  { return float32(math.Sin(float64(x))) }
