package residency

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"ferry/backend/cpu"
	"ferry/dtype"
	"ferry/tensor"
	"ferry/trace"
)

// fakeBackend implements only what the executor calls (Device, Upload); any
// other kernel would panic through the nil embedded interface.
type fakeBackend struct {
	tensor.Backend
	dev tensor.Device
}

func (f fakeBackend) Device() tensor.Device { return f.dev }
func (f fakeBackend) Upload(dst *tensor.Tensor, src []byte, t dtype.DType) error {
	return dtype.ToF32(dst.F32(), src, t)
}

// memSource is an in-memory checkpoint that counts reads and drops.
type memSource struct {
	mu      sync.Mutex
	tensors map[string]memTensor
	reads   int64
	drops   int
	dropped []string // the tensors dropped, in order
}

type memTensor struct {
	info TensorInfo
	data []byte
}

func (m *memSource) Info(name string) (TensorInfo, bool) {
	t, ok := m.tensors[name]
	return t.info, ok
}

func (m *memSource) Read(name string, off int64, dst []byte) error {
	t, ok := m.tensors[name]
	if !ok || off+int64(len(dst)) > int64(len(t.data)) {
		return fmt.Errorf("read %s out of range", name)
	}
	copy(dst, t.data[off:])
	m.mu.Lock()
	m.reads += int64(len(dst))
	m.mu.Unlock()
	return nil
}

func (m *memSource) Drop(name string) {
	m.mu.Lock()
	m.drops++
	m.dropped = append(m.dropped, name)
	m.mu.Unlock()
}

// droppedSoFar lists the tensors dropped until now.
func (m *memSource) droppedSoFar() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dropped)
}

// bf16 tensor whose element i is base+i (exact in bf16 for small values).
func (m *memSource) add(name string, base float32, shape ...int) {
	n := tensor.NumElems(shape)
	data := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(data[2*i:], dtype.F32ToBF16(base+float32(i)))
	}
	m.tensors[name] = memTensor{TensorInfo{DType: dtype.BF16, Shape: shape, Size: int64(len(data))}, data}
}

type testBlock struct {
	W    *tensor.Tensor `w:"w"`
	Bias *tensor.Tensor `w:"b,optional"`
	Sub  struct {
		Norm *tensor.Tensor `w:"weight"`
	} `w:"norm"`
}

// component builds n blocks of 2 tensors each; block i's w starts at 4*i.
func component(name string, n, width int) (*Component, *memSource, []*testBlock) {
	src := &memSource{tensors: map[string]memTensor{}}
	c := &Component{Name: name, Source: src}
	var ws []*testBlock
	for i := range n {
		prefix := fmt.Sprintf("blocks.%d.", i)
		src.add(prefix+"w", float32(4*i), width, width)
		src.add(prefix+"norm.weight", 1, width)
		w := &testBlock{}
		ws = append(ws, w)
		c.Blocks = append(c.Blocks, &Block{Name: fmt.Sprintf("%s.blocks.%d", name, i), Prefix: prefix, Weights: w})
	}
	return c, src, ws
}

type rig struct {
	dev, host *cpu.Device
	rec       *trace.Recorder
	ex        *Executor
	peak      int64
}

func newRig(t *testing.T, devCap int64, plan *Plan) *rig {
	t.Helper()
	r := &rig{dev: cpu.NewDevice(devCap), host: cpu.NewDevice(0), rec: trace.New()}
	ex, err := New(Config{
		Backend:     fakeBackend{dev: r.dev},
		HostBackend: fakeBackend{dev: r.host},
		Plan:        plan,
		Trace:       r.rec,
		ChunkBytes:  1000, // several chunks per tensor: exercises the staging path
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ex = ex
	t.Cleanup(ex.Close)
	return r
}

// runAll runs every block once (steps times), checking the bound weights.
func (r *rig) runAll(t *testing.T, c *Component, ws []*testBlock, steps int) {
	t.Helper()
	for s := 0; s < steps; s++ {
		for i, b := range c.Blocks {
			err := r.ex.Run(b, func() error {
				w := ws[i]
				if w.W == nil || w.Sub.Norm == nil {
					return errors.New("weights not bound")
				}
				if w.Bias != nil {
					return errors.New("optional missing tensor was bound")
				}
				if got, want := w.W.F32()[3], float32(4*i+3); got != want {
					return fmt.Errorf("block %d: w[3] = %v, want %v", i, got, want)
				}
				r.peak = max(r.peak, r.dev.Stats().Allocated)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if ws[i].W != nil {
				t.Fatalf("block %d: weights still bound after Run", i)
			}
		}
	}
}

func TestPlacementsBindCorrectWeights(t *testing.T) {
	const n, width = 6, 40
	raw := alignUp(4*width*width) + alignUp(4*width)
	block := (raw + 511) / 512 * 512 // the allocator rounds to 512 bytes
	cases := []struct {
		plan      ComponentPlan
		maxBlocks int64 // device weights never exceed this many blocks
		endBlocks int64 // blocks left after Done
	}{
		{ComponentPlan{Placement: Resident}, n, n},
		{ComponentPlan{Placement: Onload}, n, n},
		{ComponentPlan{Placement: Stream, Prefetch: 0}, 1, 0},
		{ComponentPlan{Placement: Stream, Prefetch: 1}, 2, 0},
		{ComponentPlan{Placement: Stream, Prefetch: 2, Tier: TierDisk}, 3, 0},
		{ComponentPlan{Placement: Stream, Prefetch: 1, Persistent: 2}, 4, 2},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s_k%d_n%d_%s", tc.plan.Placement, tc.plan.Prefetch, tc.plan.Persistent, tc.plan.Tier)
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 0, Uniform("t", tc.plan, "den"))
			c, _, ws := component("den", n, width)
			if err := r.ex.Register(c); err != nil {
				t.Fatal(err)
			}
			if c.Blocks[0].Bytes() != raw {
				t.Fatalf("block bytes %d, want %d", c.Blocks[0].Bytes(), raw)
			}
			r.runAll(t, c, ws, 3)
			if r.peak > tc.maxBlocks*block {
				t.Errorf("peak device bytes %d > %d blocks (%d)", r.peak, tc.maxBlocks, tc.maxBlocks*block)
			}
			r.ex.Done("den")
			if got := r.dev.Stats().Allocated; got != tc.endBlocks*block {
				t.Errorf("after Done: %d bytes on device, want %d blocks", got, tc.endBlocks)
			}
			r.ex.Close()
			if d, h := r.dev.Stats().Allocated, r.host.Stats().Allocated; d != 0 || h != 0 {
				t.Errorf("after Close: device %d, host %d bytes still allocated", d, h)
			}
		})
	}
}

func TestTiersReadDiskAsPlanned(t *testing.T) {
	const n, width, steps = 4, 32, 3
	for _, tier := range []Tier{TierHost, TierDisk} {
		r := newRig(t, 0, Uniform("t", ComponentPlan{Placement: Stream, Prefetch: 1, Tier: tier}, "den"))
		c, src, ws := component("den", n, width)
		if err := r.ex.Register(c); err != nil {
			t.Fatal(err)
		}
		r.runAll(t, c, ws, 1)
		// The copy worker may already have prefetched the next step's
		// block 0 (its second read, which drops): any other drop was a
		// first read's.
		for _, name := range src.droppedSoFar() {
			if tier == TierDisk && !strings.HasPrefix(name, "blocks.0.") {
				t.Errorf("disk tier dropped the page cache of %s on its first read: the next run could not find it", name)
			}
		}
		r.runAll(t, c, ws, steps-1)
		r.ex.Done("den")
		one := int64(0)
		for _, b := range c.Blocks {
			one += b.rawBytes
		}
		perTensor := int64(2*width*width + 2*width)
		total := perTensor * n
		st := r.ex.Stats()
		switch tier {
		case TierHost: // read once, kept in host RAM in bf16
			if src.drops != 0 {
				t.Errorf("host tier dropped the page cache of %d tensors: a one-time read leaves it to the kernel", src.drops)
			}
			if src.reads != total {
				t.Errorf("host tier read %d bytes from disk, want %d (once)", src.reads, total)
			}
			if h := r.host.Stats().Allocated; h < total {
				t.Errorf("host tier holds %d bytes, want >= %d", h, total)
			}
		case TierDisk: // read at every load; +1 wrap-around prefetch of block 0 per step
			if src.reads < total*steps {
				t.Errorf("disk tier read %d bytes, want >= %d", src.reads, total*steps)
			}
			// Every tensor at every load but a block's first.
			if src.drops < 2*n*(steps-1) || src.drops > 2*n*steps {
				t.Errorf("disk tier dropped the page cache of %d tensors, want those of every reload (%d..%d)", src.drops, 2*n*(steps-1), 2*n*steps)
			}
		}
		if st.BytesReadDisk != src.reads {
			t.Errorf("%s: stats say %d bytes read, source saw %d", tier, st.BytesReadDisk, src.reads)
		}
	}
}

func TestBudgetSmallerThanBlockFailsAtRegister(t *testing.T) {
	r := newRig(t, 4096, Uniform("t", ComponentPlan{Placement: Stream}, "den"))
	c, _, _ := component("den", 2, 64)
	err := r.ex.Register(c)
	if err == nil {
		t.Fatal("Register accepted a block larger than the device budget")
	}
	for _, want := range []string{"den.blocks.0", "16.25 KiB", "4.00 KiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

func TestMissingTensorNamesIt(t *testing.T) {
	r := newRig(t, 0, nil)
	c, src, _ := component("enc", 2, 8)
	delete(src.tensors, "blocks.1.norm.weight")
	err := r.ex.Register(c)
	if err == nil || !strings.Contains(err.Error(), `"blocks.1.norm.weight" is missing`) {
		t.Fatalf("got %v", err)
	}
}

func TestOnloadEvictsIdleComponentUnderPressure(t *testing.T) {
	const width = 64
	block := (alignUp(4*width*width) + alignUp(4*width) + 511) / 512 * 512 // as the allocator rounds
	// Room for one 3-block component and a little more, not two.
	plan := &Plan{Components: map[string]ComponentPlan{
		"a": {Placement: Onload},
		"b": {Placement: Onload},
	}}
	r := newRig(t, 4*block+block/2, plan)
	a, _, wa := component("a", 3, width)
	b, _, wb := component("b", 3, width)
	for _, c := range []*Component{a, b} {
		if err := r.ex.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	r.runAll(t, a, wa, 1)
	if got := r.dev.Stats().Allocated; got != 3*block {
		t.Fatalf("a onloaded: %d bytes, want %d", got, 3*block)
	}
	r.runAll(t, b, wb, 1) // must evict a to fit
	if got := r.dev.Stats().Allocated; got != 3*block {
		t.Fatalf("b onloaded: %d bytes, want %d (a evicted)", got, 3*block)
	}
	if r.ex.Stats().Evictions != 3 {
		t.Errorf("evictions %d, want 3", r.ex.Stats().Evictions)
	}
	r.runAll(t, a, wa, 1) // and back
	if s := r.dev.Stats(); s.PeakReserved > 4*block+block/2 {
		t.Errorf("peak reserved %d over capacity", s.PeakReserved)
	}
}

func TestStreamCopiesPrecedeCompute(t *testing.T) {
	r := newRig(t, 0, Uniform("t", ComponentPlan{Placement: Stream, Prefetch: 1}, "den"))
	c, _, ws := component("den", 5, 48)
	if err := r.ex.Register(c); err != nil {
		t.Fatal(err)
	}
	r.runAll(t, c, ws, 2)
	r.ex.Done("den")
	copyEnd := map[string][]float64{}
	for _, s := range r.rec.Spans() {
		if s.Kind == trace.Copy {
			copyEnd[s.Name] = append(copyEnd[s.Name], s.End().Seconds())
		}
	}
	seen := map[string]int{}
	for _, s := range r.rec.Spans() {
		if s.Kind != trace.Compute {
			continue
		}
		k := seen[s.Name]
		seen[s.Name]++
		if k >= len(copyEnd[s.Name]) || copyEnd[s.Name][k] > s.Start.Seconds() {
			t.Fatalf("compute of %s (#%d) started before its copy ended", s.Name, k)
		}
	}
}

func TestHostPlacementUsesHostMemory(t *testing.T) {
	r := newRig(t, 0, Uniform("t", ComponentPlan{Placement: Host}, "enc"))
	c, _, ws := component("enc", 2, 16)
	if err := r.ex.Register(c); err != nil {
		t.Fatal(err)
	}
	r.runAll(t, c, ws, 1)
	if d := r.dev.Stats().PeakAllocated; d != 0 {
		t.Errorf("host placement used %d device bytes", d)
	}
	if h := r.host.Stats().Allocated; h == 0 {
		t.Errorf("host placement holds nothing in host memory")
	}
	if r.ex.Ops("enc").B.Device() != tensor.Device(r.host) {
		t.Errorf("Ops for a host component do not compute on the host")
	}
}

func TestUpcastIsExact(t *testing.T) {
	v := float32(math.Pi)
	b := dtype.F32ToBF16(v)
	if got := dtype.BF16ToF32(b); math.Abs(float64(got-v)) > 0.01 {
		t.Fatalf("bf16 round trip %v -> %v", v, got)
	}
}

// Between runs a kept executor gives back its read staging buffer (the
// only host memory a disk-tier plan holds), and the next run reads
// through a new one.
func TestReleaseStaging(t *testing.T) {
	const n, width = 3, 32
	r := newRig(t, 0, Uniform("t", ComponentPlan{Placement: Stream, Prefetch: 1, Tier: TierDisk}, "den"))
	c, src, ws := component("den", n, width)
	if err := r.ex.Register(c); err != nil {
		t.Fatal(err)
	}
	r.runAll(t, c, ws, 1)
	r.ex.Done("den")
	if h := r.host.Stats().Allocated; h == 0 {
		t.Fatal("no staging buffer after reads from disk")
	}
	r.ex.ReleaseStaging()
	if h := r.host.Stats().Allocated; h != 0 {
		t.Errorf("%d host bytes after ReleaseStaging, want 0", h)
	}
	read := src.reads
	r.runAll(t, c, ws, 1)
	r.ex.Done("den")
	if src.reads <= read {
		t.Error("the run after ReleaseStaging read nothing from disk")
	}
}
