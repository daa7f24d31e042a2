// Package pipeline holds what every pipeline shares: the runtime (budgeted
// devices, backends, the residency executor, the trace), phase timing, and
// the report that a run writes. Model-family pipelines live in
// subpackages (pipeline/synthetic, pipeline/wan).
package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
	"ferry/trace"
)

// Budget caps device and host memory in bytes (0: unlimited).
type Budget struct {
	DeviceBytes int64 `json:"device_bytes"`
	HostBytes   int64 `json:"host_bytes"`
}

// Runtime is one request's machinery.
type Runtime struct {
	Budget      Budget
	Plan        *residency.Plan
	Device      *cpu.Device
	Host        *cpu.Device
	Backend     tensor.Backend
	HostBackend tensor.Backend
	Exec        *residency.Executor
	Trace       *trace.Recorder
	// ComputeDType is the dtype GEMM weights take on the device.
	ComputeDType dtype.DType

	ctx     context.Context
	stopRSS func()
	start   time.Time
	phases  map[string]time.Duration
	// copiedBefore is the executor's counters when this request began
	// (NewRequest): Measure reports what the request added.
	copiedBefore residency.Stats
	steps        []time.Duration
	// meters follow the device's and the host's reserved bytes (Join).
	meters atomic.Pointer[[2]*Meter]
}

// Options tune a runtime beyond the budget and plan.
type Options struct {
	// Gemm overrides the GEMM implementation (nil: gemm.Best()).
	Gemm gemm.Impl
	// Context cancels a run between blocks (Ctrl-C); nil never cancels.
	Context context.Context
	// OnBlock is called after every block computes (progress).
	OnBlock func(component, block string)
	// RSSEvery samples the process RSS into the trace this often (0: 100ms).
	RSSEvery time.Duration
	// ComputeDType BF16 keeps GEMM weights bf16 on the device and rounds
	// activations to bf16 at the GEMM input (float32 accumulation); F32
	// (the default, also when zero) multiplies in float32: GEMM weights
	// stored as bf16, fp16 or fp8 stay so on the device where the CPU
	// GEMM widens them as it packs them (KeepStored), and are widened to
	// float32 on the device elsewhere.
	ComputeDType dtype.DType
	// SmallPagesFirst maps device and host memory with 4 KiB pages out of
	// the kernel's fragmented free memory while it lasts, huge pages after
	// (cpu.Device.SmallPagesFirst): where the hardware profile measured
	// those pages cheaper to touch (hwprofile.Profile.SmallPagesFirst).
	SmallPagesFirst bool
	// DenseWeights keeps GEMM weights unpacked (training: the backward
	// kernels refuse packed matrices).
	DenseWeights bool
}

// DefaultComputeDType is BF16 where the CPU multiplies bf16 natively
// (AVX512-BF16), F32 elsewhere.
func DefaultComputeDType() dtype.DType { return ComputeDTypeFor(false) }

// ComputeDTypeFor is DefaultComputeDType on a machine where calibrate
// measured the bf16 GEMM slower than the float32 one (bf16Slower;
// hwprofile.Profile.BF16Slower): F32 there, as bf16 would only round.
func ComputeDTypeFor(bf16Slower bool) dtype.DType {
	if gemm.HasBF16Kernel() && !bf16Slower {
		return dtype.BF16
	}
	return dtype.F32
}

// ParseComputeDType reads a compute dtype by name: bf16, fp32, or auto (or
// nothing), which is ComputeDTypeFor(bf16Slower()); bf16Slower is asked
// only then (it may read the hardware profile). The CLI's --dtype and the
// server's requests take the same names.
func ParseComputeDType(name string, bf16Slower func() bool) (dtype.DType, error) {
	if n := strings.ToLower(name); n == "" || n == "auto" {
		return ComputeDTypeFor(bf16Slower()), nil
	}
	if dt, err := dtype.Parse(name); err == nil && (dt == dtype.BF16 || dt == dtype.F32) {
		return dt, nil
	}
	return 0, fmt.Errorf("%q: want bf16, fp32 or auto", name)
}

// KeepStored reports which storage dtypes GEMM weights keep on the device
// (residency.MatrixDeviceType): bf16, fp16 and fp8 wherever the CPU GEMM
// widens them inside its packing at the fp32 rate (x86-64 with AVX2 and
// F16C), so an AVX2 machine holds the same bytes as an AVX-512 one. None
// for dense weights (training: the backward kernels take float32 or bf16
// matrices only). The planner counts device bytes with the same predicate
// and rule (planner.keepStored, residency.MatrixDeviceType).
func KeepStored(dense bool) func(dtype.DType) bool {
	if dense {
		return nil
	}
	return gemm.Expands
}

// NewRuntime builds devices under the budget and an executor for the plan.
func NewRuntime(b Budget, plan *residency.Plan, opt Options) (*Runtime, error) {
	if plan == nil {
		plan = &residency.Plan{Name: "resident", Components: map[string]residency.ComponentPlan{}}
	}
	g := opt.Gemm
	if g == nil {
		g = gemm.Best()
	}
	rt := &Runtime{
		Budget: b,
		Plan:   plan,
		Device: cpu.NewDevice(b.DeviceBytes),
		Host:   cpu.NewDevice(b.HostBytes),
		Trace:  trace.New(),
		phases: map[string]time.Duration{},
		ctx:    opt.Context,
	}
	if rt.ctx == nil {
		rt.ctx = context.Background()
	}
	if opt.SmallPagesFirst {
		rt.Device.SmallPagesFirst(cpu.FragmentedFree)
		rt.Host.SmallPagesFirst(cpu.FragmentedFree)
	}
	rt.Device.Observe(rt.counter("device", rt.Device, 0))
	rt.Host.Observe(rt.counter("host", rt.Host, 1))
	be, hostBe := cpu.New(rt.Device, g), cpu.New(rt.Host, g)
	matrix := dtype.F32
	if opt.ComputeDType == dtype.BF16 {
		matrix = dtype.BF16
		for _, b := range []*cpu.Backend{be, hostBe} {
			if err := b.SetComputeDType(dtype.BF16); err != nil {
				return nil, err
			}
		}
	}
	rt.Backend, rt.HostBackend, rt.ComputeDType = be, hostBe, matrix
	ex, err := residency.New(residency.Config{Backend: rt.Backend, HostBackend: rt.HostBackend, Plan: plan, Trace: rt.Trace,
		Context: rt.ctx, OnBlock: opt.OnBlock, MatrixDType: matrix, KeepStored: KeepStored(opt.DenseWeights), Dense: opt.DenseWeights})
	if err != nil {
		return nil, err
	}
	rt.Exec = ex
	resetPeakRSS()
	every := opt.RSSEvery
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	rt.Trace.SetResolution(trace.CounterRSS, 1<<20)
	rt.stopRSS = rt.Trace.SampleRSS(every)
	rt.start = time.Now()
	return rt, nil
}

// counter feeds a device's allocated and reserved bytes into the trace,
// and its reserved bytes into the meter at index meter of those rt joined.
func (rt *Runtime) counter(name string, d *cpu.Device, meter int) func(cpu.AllocEvent) {
	rec := rt.Trace
	rec.SetResolution(name+" allocated", 1<<20)
	rec.SetResolution(name+" reserved", 1<<20)
	return func(ev cpu.AllocEvent) {
		rec.Count(name+" allocated", ev.Stats.Allocated)
		rec.Count(name+" reserved", ev.Stats.Reserved)
		if ms := rt.meters.Load(); ms != nil && ms[meter] != nil {
			ms[meter].set(d, ev.Stats.Reserved)
		}
	}
}

// Phase starts timing a named phase; call the result to end it.
func (rt *Runtime) Phase(name string) func() {
	t0 := time.Now()
	end := rt.Trace.Begin(trace.Phase, trace.TrackPhase, name, 0)
	return func() {
		end()
		rt.phases[name] += time.Since(t0)
	}
}

// Step starts timing denoising step i (from 0); call the result to end
// it. The step shows in the trace as a phase span and in the report.
func (rt *Runtime) Step(i int) func() {
	t0 := time.Now()
	end := rt.Trace.Begin(trace.Phase, trace.TrackPhase, fmt.Sprintf("denoise step %d", i+1), 0)
	return func() {
		end()
		rt.steps = append(rt.steps, time.Since(t0))
	}
}

// NewRequest readies a runtime kept across requests (a server's resident
// model) for the next one, so that Measure, the trace and the chart hold
// that request alone: the clock, phase and step times, copy figures and
// peaks start again (the executor's own counters run on), and the trace's
// memory counters start from what stays resident.
func (rt *Runtime) NewRequest() {
	rt.start = time.Now()
	rt.steps = nil
	clear(rt.phases)
	rt.copiedBefore = rt.Exec.Stats()
	rt.Trace.Reset()
	for _, d := range []struct {
		name string
		dev  *cpu.Device
	}{{"device", rt.Device}, {"host", rt.Host}} {
		d.dev.ResetPeakStats()
		st := d.dev.Stats()
		rt.Trace.Count(d.name+" allocated", st.Allocated)
		rt.Trace.Count(d.name+" reserved", st.Reserved)
	}
}

// Idle gives back what a runtime kept between requests holds beyond its
// resident weights: the read staging buffer and the allocators' cached
// segments, so that its reserved bytes are weights another job can demote.
func (rt *Runtime) Idle() {
	rt.Exec.ReleaseStaging()
	rt.Device.EmptyCache()
	rt.Host.EmptyCache()
}

// Close releases the executor and every byte of the devices.
func (rt *Runtime) Close() {
	if rt.stopRSS != nil {
		rt.stopRSS()
		rt.stopRSS = nil
	}
	rt.Exec.Close()
	rt.Device.EmptyCache()
	rt.Host.EmptyCache()
}

// CheckReleased reports an error when memory is still allocated after Close.
func (rt *Runtime) CheckReleased() error {
	if d, h := rt.Device.Stats().Allocated, rt.Host.Stats().Allocated; d != 0 || h != 0 {
		return fmt.Errorf("leak: %s on the device and %s on the host still allocated", tensor.FormatBytes(d), tensor.FormatBytes(h))
	}
	return nil
}

// Err reports whether the run was cancelled; pipelines check it between
// steps and blocks so that Ctrl-C stops promptly and releases everything.
func (rt *Runtime) Err() error { return rt.ctx.Err() }
