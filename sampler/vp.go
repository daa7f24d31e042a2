package sampler

import (
	"fmt"
	"math"
)

// The variance-preserving (VP) schedule of UniPC without flow sigmas:
// diffusers' constructor builds betas, their cumulative product of 1 - beta
// and the training sigmas sqrt((1 - alphas_cumprod) / alphas_cumprod) as
// float32 torch tensors; set_timesteps picks integer timesteps by
// timestep_spacing and reads the sigmas at them (numpy).

// maxTrainTimesteps bounds the beta schedule a config may ask for (models
// train on 1000).
const maxTrainTimesteps = 1 << 20

// trainingSigmas returns the float32 training sigmas of a UniPC config, one
// per training timestep, from its beta schedule.
func (c UniPCConfig) trainingSigmas() ([]float32, error) {
	betas, err := c.betas()
	if err != nil {
		return nil, err
	}
	if c.RescaleBetasZeroSNR {
		betas = rescaleZeroTerminalSNR(betas)
	}
	acp := cumprodOneMinus(betas)
	if c.RescaleBetasZeroSNR {
		// diffusers: close to 0 without being 0, so the first sigma is
		// finite (float16's smallest subnormal).
		acp[len(acp)-1] = 0x1p-24
	}
	sigmas := make([]float32, len(acp))
	for i, a := range acp {
		sigmas[i] = float32(math.Sqrt(float64((1 - a) / a)))
		if s := float64(sigmas[i]); !(s > 0) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("the beta schedule gives sigma %v at training timestep %d (betas must lie in (0, 1))", sigmas[i], i)
		}
	}
	return sigmas, nil
}

// betas is the constructor's float32 beta schedule.
func (c UniPCConfig) betas() ([]float32, error) {
	n := c.NumTrainTimesteps
	switch {
	case c.TrainedBetas != nil:
		if len(c.TrainedBetas) < 2 {
			return nil, fmt.Errorf("trained_betas needs at least 2 values, got %d", len(c.TrainedBetas))
		}
		return toFloat32(c.TrainedBetas), nil
	case n < 2:
		return nil, fmt.Errorf("num_train_timesteps must be at least 2 without flow sigmas, got %d", n)
	case n > maxTrainTimesteps:
		return nil, fmt.Errorf("num_train_timesteps %d is too large without flow sigmas (at most %d: the schedule holds a beta for each)", n, maxTrainTimesteps)
	}
	switch c.BetaSchedule {
	case "linear":
		return torchLinspace(float32(c.BetaStart), float32(c.BetaEnd), n), nil
	case "scaled_linear":
		b := torchLinspace(float32(math.Sqrt(c.BetaStart)), float32(math.Sqrt(c.BetaEnd)), n)
		for i, v := range b {
			b[i] = v * v
		}
		return b, nil
	case "squaredcos_cap_v2":
		return cosineBetas(n), nil
	}
	return nil, fmt.Errorf("beta_schedule %q is not supported", c.BetaSchedule)
}

// torchLinspace is torch.linspace(start, end, n, dtype=torch.float32) on the
// CPU: step = (end - start) / (n - 1) in float32, the first half counted up
// from start and the second half down from end. Where the kernel is built
// for FMA (PyTorch's AVX2 and AVX-512 builds, arm64) C++ compilers contract
// start + step*i into one fused multiply-add by default; this follows such
// a build (docs/numerics.md says what the other one changes).
func torchLinspace(start, end float32, n int) []float32 {
	out := make([]float32, n)
	if n == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float32(n-1)
	half := n / 2
	for i := range out {
		if i < half {
			out[i] = float32(math.FMA(float64(step), float64(float32(i)), float64(start)))
		} else {
			out[i] = float32(math.FMA(-float64(step), float64(float32(n-i-1)), float64(end)))
		}
	}
	return out
}

// cosineBetas is betas_for_alpha_bar with the cosine alpha bar (Glide's
// squaredcos_cap_v2), computed with Python floats and stored as float32.
func cosineBetas(n int) []float32 {
	alphaBar := func(t float64) float64 {
		c := math.Cos((t + 0.008) / 1.008 * math.Pi / 2)
		return c * c
	}
	out := make([]float32, n)
	for i := range out {
		t1 := float64(i) / float64(n)
		t2 := float64(i+1) / float64(n)
		out[i] = float32(min(1-alphaBar(t2)/alphaBar(t1), 0.999))
	}
	return out
}

// cumprodOneMinus is torch.cumprod(1 - betas) in float32: 1 - beta rounds to
// float32, and the CPU kernel keeps its running product in float64,
// rounding only what it stores.
func cumprodOneMinus(betas []float32) []float32 {
	out := make([]float32, len(betas))
	p := 1.0
	for i, b := range betas {
		p *= float64(1 - b)
		out[i] = float32(p)
	}
	return out
}

// rescaleZeroTerminalSNR is diffusers' rescale_zero_terminal_snr (Lin et
// al. 2023, Algorithm 1) in float32: shift sqrt(alphas_cumprod) so the last
// is 0, scale it so the first keeps its value, and turn it back into betas.
func rescaleZeroTerminalSNR(betas []float32) []float32 {
	root := cumprodOneMinus(betas)
	for i, a := range root {
		root[i] = float32(math.Sqrt(float64(a)))
	}
	first, last := root[0], root[len(root)-1]
	scale := first / (first - last)
	for i := range root {
		v := (root[i] - last) * scale
		root[i] = v * v // alphas_bar
	}
	out := make([]float32, len(root))
	out[0] = 1 - root[0]
	for i := 1; i < len(root); i++ {
		out[i] = 1 - root[i]/root[i-1]
	}
	return out
}

// spacedTimesteps returns set_timesteps' integer timesteps for n steps by
// timestep_spacing (Table 2 of "Common Diffusion Noise Schedules and Sample
// Steps are Flawed"), largest first, in numpy's float64 arithmetic.
func (c UniPCConfig) spacedTimesteps(n int) []int64 {
	nt := c.NumTrainTimesteps
	var ts []int64
	switch c.TimestepSpacing {
	case "leading":
		// (np.arange(0, n+1) * (nt // (n+1))).round()[::-1][:-1] + steps_offset
		ratio := nt / (n + 1)
		for i := n; i >= 1; i-- {
			ts = append(ts, int64(i*ratio+c.StepsOffset))
		}
	case "trailing":
		// np.arange(nt, 0, -nt/n).round() - 1
		for _, v := range arange(float64(nt), 0, -float64(nt)/float64(n)) {
			ts = append(ts, int64(math.RoundToEven(v))-1)
		}
	default: // linspace
		// np.linspace(0, nt-1, n+1).round()[::-1][:-1]
		vs := linspace(0, float64(nt-1), n+1)
		for i := n; i >= 1; i-- {
			ts = append(ts, int64(math.RoundToEven(vs[i])))
		}
	}
	return ts
}

// arange is np.arange(start, stop, step) for float64: ceil((stop - start) /
// step) values, the second start + step, and every later one start + i*d
// with d recomputed from the first two, as numpy fills the array.
func arange(start, stop, step float64) []float64 {
	n := int(math.Ceil((stop - start) / step))
	if n <= 0 {
		return nil
	}
	out := make([]float64, n)
	out[0] = start
	if n > 1 {
		out[1] = start + step
	}
	d := out[min(1, n-1)] - start
	for i := 2; i < n; i++ {
		out[i] = start + float64(float64(i)*d)
	}
	return out
}

// sigmasAt is np.interp(timesteps, np.arange(len(sigmas)), sigmas) for
// integer timesteps: the sigma at each, the end values outside the range.
func sigmasAt(sigmas []float32, timesteps []int64) []float64 {
	out := make([]float64, len(timesteps))
	last := int64(len(sigmas) - 1)
	for i, t := range timesteps {
		out[i] = float64(sigmas[min(max(t, 0), last)])
	}
	return out
}

// logSigmas is np.log of the float32 training sigmas, a float32 array.
func logSigmas(sigmas []float32) []float32 {
	out := make([]float32, len(sigmas))
	for i, s := range sigmas {
		out[i] = float32(math.Log(float64(s)))
	}
	return out
}

// sigmaToT is diffusers' _sigma_to_t: the fractional training timestep of
// sigma, interpolated linearly in log sigma between the two training
// sigmas around it (clamped to the ends). Under numpy 1.x's value-based
// casting the float64 log sigma meets the float32 table as float32, so the
// weight is float32; the timestep it gives is float64.
func sigmaToT(sigma float64, logs []float32) float64 {
	l32 := float32(math.Log(math.Max(sigma, 1e-10)))
	low := 0 // cumsum(dists >= 0).argmax(): the last index at or below
	for i, l := range logs {
		if l32-l >= 0 {
			low = i
		}
	}
	low = min(low, len(logs)-2)
	lo, hi := logs[low], logs[low+1]
	w := (lo - l32) / (lo - hi)
	w = min(max(w, 0), 1)
	return float64(float64(1-w)*float64(low)) + float64(float64(w)*float64(low+1))
}

// alphaSigma is _sigma_to_alpha_sigma_t in float32: alpha_t = 1 - sigma and
// sigma_t = sigma with flow sigmas, else alpha_t = 1 / sqrt(sigma^2 + 1)
// and sigma_t = sigma * alpha_t.
func alphaSigma(sigma float32, flow bool) (alpha, sigmaT float32) {
	if flow {
		return 1 - sigma, sigma
	}
	alpha = 1 / float32(math.Sqrt(float64(float32(sigma*sigma)+1)))
	return alpha, sigma * alpha
}

// lambdaOf is log(alpha_t) - log(sigma_t), each a float32 tensor operation.
func lambdaOf(alpha, sigmaT float32) float64 {
	return r32(r32(math.Log(float64(alpha))) - r32(math.Log(float64(sigmaT))))
}
