package sampler

import (
	"fmt"
	"math"
)

// UniPC is diffusers' UniPCMultistepScheduler: a multistep predictor (UniP)
// and corrector (UniC) in the B(h) form, bh1 or bh2, on the predicted x0
// (predict_x0) or the predicted noise. With flow sigmas and flow prediction
// it is the scheduler of WanPipeline; without flow sigmas it runs the
// variance-preserving schedule of its betas (epsilon, sample or
// v-prediction models).
//
// Numerics follow diffusers: the schedule is built in float64 (numpy) and
// stored as float32 sigmas and int64 timesteps; every coefficient derived
// from a sigma is a float32 tensor operation, so it is rounded to float32
// after each operation here too.
type UniPC struct {
	cfg      UniPCConfig
	disabled map[int]bool // disable_corrector as a set
	// train holds the float32 training sigmas of the beta schedule, which
	// the schedule is built from without flow sigmas and with Karras
	// sigmas (nil otherwise).
	train []float32

	sigmas    []float32 // n+1 values, the last one final_sigmas_type
	timesteps []int64   // n values, int64(sigma*num_train_timesteps)

	// Stepping state (diffusers' step_index, lower_order_nums, this_order,
	// last_sample, model_outputs).
	stepIndex      int
	beginIndex     int
	stepped        bool // a Step ran since the schedule was set or reset
	lowerOrderNums int
	thisOrder      int
	hasLast        bool

	// Buffers, sized on the first Step and reused while the sample size
	// and the order stay the same. hist holds the last order x0
	// predictions (the most a step reads), oldest first; spare takes the
	// newest before it joins hist (the corrector still needs every old
	// entry); last is last_sample.
	size  int
	hist  [][]float32
	spare []float32
	last  []float32
	// sorted is dynamic thresholding's scratch (thresholding only).
	sorted []float32

	// Per-step scratch, sized by sizeOrder when the schedule is set so
	// that Step does not allocate; order is the highest order it holds.
	order int
	rks   []float64
	rk32  []float32 // rks as the float32 tensor diffusers divides by
	mat   []float64 // R, order x order
	lu    []float64 // the block of R being solved
	vec   []float64 // b
	rhos  []float32
	ms    [][]float32
}

var _ Scheduler = (*UniPC)(nil)

// NewUniPC builds the scheduler, rejecting configs it does not implement.
func NewUniPC(cfg UniPCConfig) (*UniPC, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	u := &UniPC{cfg: cfg, disabled: make(map[int]bool, len(cfg.DisableCorrector))}
	for _, i := range cfg.DisableCorrector {
		u.disabled[i] = true
	}
	if !cfg.UseFlowSigmas || cfg.UseKarrasSigmas {
		train, err := cfg.trainingSigmas()
		if err != nil {
			return nil, fmt.Errorf("sampler: %s: %w", ClassUniPC, err)
		}
		u.train = train
	}
	return u, nil
}

// sizeOrder sizes the per-step scratch for the orders a schedule of n
// steps can reach: min(solver_order, n), since the order rises by one per
// step. A config's solver_order may be any positive number (diffusers'
// model_outputs is a list of that many Nones); memory follows the steps.
func (u *UniPC) sizeOrder(n int) {
	p := min(u.cfg.SolverOrder, n)
	if p == u.order {
		return
	}
	u.order = p
	u.rks = make([]float64, p)
	u.rk32 = make([]float32, p)
	u.mat = make([]float64, p*p)
	u.lu = make([]float64, p*p)
	u.vec = make([]float64, p)
	u.rhos = make([]float32, p)
	u.ms = make([][]float32, p)
}

// Config returns the validated config.
func (u *UniPC) Config() UniPCConfig { return u.cfg }

// SolverOrder is the multistep order (solver_order).
func (u *UniPC) SolverOrder() int { return u.cfg.SolverOrder }

// Order is diffusers' scheduler.order: one model evaluation per step.
func (u *UniPC) Order() int { return 1 }

// SetTimesteps computes the schedule for n steps.
func (u *UniPC) SetTimesteps(n int) error { return u.SetTimestepsWith(n, ScheduleOptions{}) }

// SetTimestepsWith computes the schedule with optional custom (unshifted)
// sigmas and the dynamic-shift mu, both for flow sigmas only.
func (u *UniPC) SetTimestepsWith(n int, opts ScheduleOptions) error {
	var sigmas []float32
	var timesteps []int64
	var err error
	if u.train == nil {
		sigmas, timesteps, err = u.flowSchedule(n, opts)
	} else {
		sigmas, timesteps, err = u.trainedSchedule(n, opts)
	}
	if err != nil {
		return err
	}
	u.sigmas, u.timesteps = sigmas, timesteps
	u.sizeOrder(len(u.timesteps))
	u.Reset()
	return nil
}

// flowSchedule is set_timesteps with flow sigmas: the shifted sigmas and
// timesteps sigma * num_train_timesteps.
func (u *UniPC) flowSchedule(n int, opts ScheduleOptions) ([]float32, []int64, error) {
	sigmas, err := u.flowSigmas(n, opts)
	if err != nil {
		return nil, nil, err
	}
	// diffusers nudges a first sigma of exactly 1 down so that
	// alpha = 1 - sigma stays positive and log(alpha) finite.
	if math.Abs(sigmas[0]-1) < 1e-6 {
		sigmas[0] -= 1e-6
	}
	timesteps := make([]int64, len(sigmas))
	for i, s := range sigmas {
		// numpy's astype(np.int64) truncates toward zero, as Go does.
		timesteps[i] = int64(s * float64(u.cfg.NumTrainTimesteps))
	}
	return u.withLast(sigmas), timesteps, nil
}

// trainedSchedule is set_timesteps from the training sigmas: read at the
// spaced timesteps, or respaced (Karras, exponential, beta) between their
// ends with the timesteps found back by log-sigma interpolation. Karras
// sigmas with flow sigmas become sigma / (sigma + 1), as diffusers maps
// them, and their timesteps sigma * num_train_timesteps.
func (u *UniPC) trainedSchedule(n int, opts ScheduleOptions) ([]float32, []int64, error) {
	c := u.cfg
	switch {
	case opts.Sigmas != nil:
		return nil, nil, fmt.Errorf("sampler: %s: custom sigmas need use_flow_sigmas without use_karras_sigmas", ClassUniPC)
	case n < 1:
		return nil, nil, fmt.Errorf("sampler: number of inference steps must be positive, got %d", n)
	}
	r := c.respacing()
	if !r.on() {
		timesteps := c.spacedTimesteps(n)
		sigmas := sigmasAt(u.train, timesteps)
		last := 0.0
		if c.FinalSigmasType == "sigma_min" {
			last = float64(u.train[0])
		}
		return toFloat32(append(sigmas, last)), timesteps, nil
	}
	sigmas, err := r.apply(float64(u.train[len(u.train)-1]), float64(u.train[0]), n)
	if err != nil {
		return nil, nil, err
	}
	logs := logSigmas(u.train)
	nt := float64(c.NumTrainTimesteps)
	timesteps := make([]int64, n)
	for i, s := range sigmas {
		switch {
		case c.UseFlowSigmas:
			s = s / (s + 1)
			sigmas[i] = s
			timesteps[i] = int64(s * nt)
		case r.karras:
			timesteps[i] = int64(math.RoundToEven(sigmaToT(s, logs)))
		default:
			timesteps[i] = int64(sigmaToT(s, logs))
		}
	}
	return u.withLast(sigmas), timesteps, nil
}

// withLast appends the final sigma (0, or the last one for sigma_min) and
// rounds the schedule to float32.
func (u *UniPC) withLast(sigmas []float64) []float32 {
	last := 0.0
	if u.cfg.FinalSigmasType == "sigma_min" {
		last = sigmas[len(sigmas)-1]
	}
	return toFloat32(append(sigmas, last))
}

// flowSigmas returns the shifted float64 sigmas, one per step.
func (u *UniPC) flowSigmas(n int, opts ScheduleOptions) ([]float64, error) {
	var sigmas []float64
	switch {
	case opts.Sigmas != nil:
		if n != 0 && n != len(opts.Sigmas) {
			return nil, fmt.Errorf("sampler: %d custom sigmas for %d steps", len(opts.Sigmas), n)
		}
		if len(opts.Sigmas) == 0 {
			return nil, fmt.Errorf("sampler: custom sigmas are empty")
		}
		if err := checkSigmas(opts.Sigmas); err != nil {
			return nil, err
		}
		sigmas = append([]float64(nil), opts.Sigmas...)
	case n < 1:
		return nil, fmt.Errorf("sampler: number of inference steps must be positive, got %d", n)
	default:
		nt := float64(u.cfg.NumTrainTimesteps)
		sigmas = linspace(1, 1/nt, n+1)[:n]
	}
	if err := applyShift(sigmas, u.cfg.UseDynamicShifting, u.cfg.FlowShift, u.cfg.TimeShiftType, opts.Mu, f64); err != nil {
		return nil, err
	}
	if t := u.cfg.ShiftTerminal; t != nil && *t != 0 {
		stretchToTerminal(sigmas, *t, f64)
	}
	return sigmas, nil
}

// applyShift applies the static shift or, with dynamic shifting, the time
// shift by mu. Without dynamic shifting mu is ignored, as diffusers'
// set_timesteps ignores it (pipelines pass it to every scheduler).
func applyShift(sigmas []float64, dynamic bool, shift float64, kind string, mu *float64, p precision) error {
	if !dynamic {
		staticShift(sigmas, shift, p)
		return nil
	}
	if mu == nil {
		return fmt.Errorf("sampler: use_dynamic_shifting needs mu (see CalculateShift)")
	}
	return timeShift(sigmas, *mu, kind, p)
}

// Timesteps returns a copy of the timesteps as float32, the value the Wan
// transformer embeds (it casts the int64 timestep to float).
func (u *UniPC) Timesteps() []float32 {
	out := make([]float32, len(u.timesteps))
	for i, t := range u.timesteps {
		out[i] = float32(t)
	}
	return out
}

// IntTimesteps returns a copy of the exact int64 timesteps.
func (u *UniPC) IntTimesteps() ([]int64, bool) {
	return append([]int64(nil), u.timesteps...), true
}

// Sigmas returns a copy of the float32 sigmas (steps+1 values).
func (u *UniPC) Sigmas() []float32 { return append([]float32(nil), u.sigmas...) }

// StepIndex returns the index of the next Step.
func (u *UniPC) StepIndex() int { return u.stepIndex }

// NoiseScales returns add_noise's alpha_t and sigma_t at step i.
func (u *UniPC) NoiseScales(i int) (alpha, sigma float32) {
	return alphaSigma(u.sigmas[i], u.cfg.UseFlowSigmas)
}

// SetBeginIndex starts the schedule at step i (image-to-image).
func (u *UniPC) SetBeginIndex(i int) error {
	return setBegin(&u.beginIndex, &u.stepIndex, i, len(u.timesteps), u.stepped)
}

// setBegin is SetBeginIndex for both schedulers.
func setBegin(begin, index *int, i, steps int, stepped bool) error {
	switch {
	case steps == 0:
		return ErrNotSet
	case stepped:
		return fmt.Errorf("sampler: SetBeginIndex after the first Step (call Reset first)")
	case i < 0 || i >= steps:
		return fmt.Errorf("sampler: begin index %d out of range [0, %d)", i, steps)
	}
	*begin, *index = i, i
	return nil
}

// Reset forgets the history and restarts the schedule at index 0.
func (u *UniPC) Reset() {
	u.stepIndex, u.beginIndex = 0, 0
	u.stepped = false
	u.lowerOrderNums, u.thisOrder = 0, 0
	u.hasLast = false
}

// Step runs one UniPC step: convert the model output to x0 (or to the
// noise, without predict_x0), correct the sample with UniC (from the
// second step on), then predict the next sample with UniP. The result
// overwrites sample.
func (u *UniPC) Step(modelOutput, sample []float32) error {
	if err := u.checkStep(modelOutput, sample); err != nil {
		return err
	}
	u.stepped = true
	i := u.stepIndex
	useCorrector := i > 0 && !u.disabled[i-1] && u.hasLast

	converted := u.spare
	u.convert(converted, modelOutput, sample)
	if useCorrector {
		u.correct(converted, sample)
	}
	u.pushHistory()

	order := u.cfg.SolverOrder
	if u.cfg.LowerOrderFinal {
		order = min(order, len(u.timesteps)-i)
	}
	u.thisOrder = min(order, u.lowerOrderNums+1) // warm-up: one more order per step

	copy(u.last, sample)
	u.hasLast = true
	u.predict(sample)

	if u.lowerOrderNums < u.cfg.SolverOrder {
		u.lowerOrderNums++
	}
	u.stepIndex++
	return nil
}

// checkStep validates a Step's arguments and sizes the buffers.
func (u *UniPC) checkStep(modelOutput, sample []float32) error {
	switch {
	case len(u.timesteps) == 0:
		return ErrNotSet
	case u.stepIndex >= len(u.timesteps):
		return ErrDone
	case len(modelOutput) != len(sample):
		return fmt.Errorf("sampler: model output has %d values, sample %d", len(modelOutput), len(sample))
	case len(sample) == 0:
		return fmt.Errorf("sampler: empty sample")
	case u.stepped && len(sample) != u.size:
		return fmt.Errorf("sampler: sample has %d values, earlier steps had %d", len(sample), u.size)
	}
	if len(sample) != u.size || len(u.hist) != u.order {
		u.allocate(len(sample))
	}
	return nil
}

func (u *UniPC) allocate(n int) {
	u.size = n
	u.hist = make([][]float32, u.order)
	for k := range u.hist {
		u.hist[k] = make([]float32, n)
	}
	u.spare = make([]float32, n)
	u.last = make([]float32, n)
	if u.cfg.Thresholding {
		u.sorted = make([]float32, n)
	}
}

// pushHistory makes spare the newest x0 and recycles the oldest buffer.
func (u *UniPC) pushHistory() {
	oldest := u.hist[0]
	copy(u.hist, u.hist[1:])
	u.hist[len(u.hist)-1] = u.spare
	u.spare = oldest
}

// history returns model_outputs[-(k+1)]: k = 0 is the newest x0.
func (u *UniPC) history(k int) []float32 { return u.hist[len(u.hist)-1-k] }

// convert is convert_model_output: the model output as the predicted x0
// (predict_x0, thresholded if configured) or as the predicted noise, into
// out, in diffusers' float32 operation order.
func (u *UniPC) convert(out, modelOutput, sample []float32) {
	sigma := u.sigmas[u.stepIndex]
	alpha, sig := alphaSigma(sigma, u.cfg.UseFlowSigmas)
	x0 := u.cfg.PredictX0
	switch pt := u.cfg.PredictionType; {
	case pt == "flow_prediction": // x0 only (validated)
		for j, s := range sample {
			out[j] = s - float32(sigma*modelOutput[j])
		}
	case pt == "epsilon" && x0:
		for j, s := range sample {
			out[j] = float32(s-float32(sig*modelOutput[j])) / alpha
		}
	case pt == "v_prediction" && x0:
		for j, s := range sample {
			out[j] = float32(alpha*s) - float32(sig*modelOutput[j])
		}
	case pt == "sample" && !x0:
		for j, s := range sample {
			out[j] = float32(s-float32(alpha*modelOutput[j])) / sig
		}
	case pt == "v_prediction":
		for j, s := range sample {
			out[j] = float32(alpha*modelOutput[j]) + float32(sig*s)
		}
	default: // epsilon without x0, sample with x0: the output itself
		copy(out, modelOutput)
	}
	if x0 && u.cfg.Thresholding {
		u.threshold(out)
	}
}

// lambdaAt returns alpha_t, sigma_t and lambda = log(alpha_t) -
// log(sigma_t) of sigma index i, each a float32 tensor operation.
func (u *UniPC) lambdaAt(i int) (alpha, sigma float32, lambda float64) {
	alpha, sigma = alphaSigma(u.sigmas[i], u.cfg.UseFlowSigmas)
	return alpha, sigma, lambdaOf(alpha, sigma)
}

// bhCoeffs holds the scalars of one UniP or UniC update from sigma_s0 (the
// current sigma) to sigma_t: x_t = xScale*x - m0Scale*m0 - resScale*res.
type bhCoeffs struct {
	xScale   float32 // sigma_t / sigma_s0 (alpha_t / alpha_s0 on the noise)
	m0Scale  float32 // alpha_t * h_phi_1 (sigma_t * h_phi_1)
	resScale float32 // alpha_t * B(h) (sigma_t * B(h))
}

// coefficients computes the update from sigma index s0 to t for the given
// order and fills u.rks with the r_k of the order-1 earlier points (sigma
// indices s0-1, s0-2, ...) and u.vec, u.mat with b and R of diffusers.
func (u *UniPC) coefficients(t, s0, order int) bhCoeffs {
	alphaT, sigmaT, lambdaT := u.lambdaAt(t)
	alphaS0, sigmaS0, lambdaS0 := u.lambdaAt(s0)
	h := r32(lambdaT - lambdaS0)
	for k := 1; k < order; k++ {
		_, _, lambdaSi := u.lambdaAt(s0 - k)
		u.rks[k-1] = r32(r32(lambdaSi-lambdaS0) / h)
	}
	u.rks[order-1] = 1

	hh := h
	if u.cfg.PredictX0 {
		hh = -h
	}
	hPhi1 := r32(math.Expm1(hh))
	bh := hh
	if u.cfg.SolverType == "bh2" {
		bh = hPhi1
	}
	hPhiK := r32(r32(hPhi1/hh) - 1)
	factorial := 1
	for i := 1; i <= order; i++ {
		for k := 0; k < order; k++ {
			u.mat[(i-1)*order+k] = powF32(u.rks[k], i-1)
		}
		u.vec[i-1] = r32(r32(hPhiK*float64(factorial)) / bh)
		factorial *= i + 1
		hPhiK = r32(r32(hPhiK/hh) - r32(1/float64(factorial)))
	}
	// On x0 the sample keeps sigma_t / sigma_s0 of itself and alpha_t
	// weighs the rest; on the noise the two swap roles.
	keep, keepS0, weigh := sigmaT, sigmaS0, alphaT
	if !u.cfg.PredictX0 {
		keep, keepS0, weigh = alphaT, alphaS0, sigmaT
	}
	return bhCoeffs{
		xScale:   keep / keepS0,
		m0Scale:  float32(float64(weigh) * hPhi1),
		resScale: float32(float64(weigh) * bh),
	}
}

// powF32 is torch.pow(x, e) for a float32 tensor and a small integer
// exponent: 0 and 1 are exact, 2 and 3 are repeated float32 products.
func powF32(x float64, e int) float64 {
	switch e {
	case 0:
		return 1
	case 1:
		return x
	case 2:
		return r32(x * x)
	case 3:
		return r32(r32(x*x) * x)
	}
	return r32(math.Pow(x, float64(e)))
}

// predict is multistep_uni_p_bh_update: from x (the corrected sample, also
// the output buffer) and the x0 history to the next sample.
func (u *UniPC) predict(x []float32) {
	order := u.thisOrder
	i := u.stepIndex
	c := u.coefficients(i+1, i, order)
	k := order - 1 // number of difference terms D1
	switch {
	case k == 1:
		u.rhos[0] = 0.5 // diffusers' simplified order-2 predictor
	case k > 1:
		u.solveRhos(order, k)
	}
	for d := 0; d < k; d++ {
		u.ms[d] = u.history(d + 1)
	}
	u.update(x, x, u.history(0), nil, c, k)
}

// correct is multistep_uni_c_bh_update: from last_sample, the x0 history
// (not yet holding modelT) and the new x0 modelT to the corrected sample,
// written to out.
func (u *UniPC) correct(modelT, out []float32) {
	order := u.thisOrder
	i := u.stepIndex
	c := u.coefficients(i, i-1, order)
	k := order - 1
	if order == 1 {
		u.rhos[0] = 0.5 // diffusers' simplified order-1 corrector
	} else {
		u.solveRhos(order, order)
	}
	for d := 0; d < k; d++ {
		u.ms[d] = u.history(d + 1)
	}
	u.update(out, u.last, u.history(0), modelT, c, k)
}

// solveRhos solves the leading n x n block of R rho = b (torch.linalg.solve
// in float32 there; float64 here, rounded to float32) into u.rhos.
func (u *UniPC) solveRhos(order, n int) {
	a := u.lu[:0]
	for r := 0; r < n; r++ {
		a = append(a, u.mat[r*order:r*order+n]...)
	}
	b := u.vec[:n]
	solveInPlace(a, b, n)
	for r := 0; r < n; r++ {
		u.rhos[r] = float32(b[r])
	}
}

// update is the element-wise part shared by UniP and UniC:
//
//	out = xScale*x - m0Scale*m0 - resScale*res
//	res = sum_d rhos[d] * (ms[d] - m0) / rks[d]                           (UniP)
//	res = sum_d rhos[d] * (ms[d] - m0) / rks[d] + rhos[k] * (modelT - m0)  (UniC)
//
// with diffusers' float32 operation order; the explicit float32 conversions
// also keep the compiler from fusing a multiply and an add. out may alias x.
func (u *UniPC) update(out, x, m0, modelT []float32, c bhCoeffs, k int) {
	if k == 0 && modelT == nil {
		// First-order prediction: no residual term.
		for j := range out {
			out[j] = float32(c.xScale*x[j]) - float32(c.m0Scale*m0[j])
		}
		return
	}
	for d := 0; d < k; d++ {
		u.rk32[d] = float32(u.rks[d])
	}
	rhoT := u.rhos[k] // rhos_c[-1]; k < solver_order, so always in range
	x, m0 = x[:len(out)], m0[:len(out)]
	for j := range out {
		m := m0[j]
		var res float32
		for d := 0; d < k; d++ {
			res += float32(u.rhos[d] * ((u.ms[d][j] - m) / u.rk32[d]))
		}
		if modelT != nil {
			res += float32(rhoT * (modelT[j] - m))
		}
		xt := float32(c.xScale*x[j]) - float32(c.m0Scale*m)
		out[j] = xt - float32(c.resScale*res)
	}
}
