package wanvae

import (
	"errors"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/residency/residencytest"
	"ferry/tensor"
)

// goldenSource is the golden checkpoint as an editable in-memory source.
func goldenSource(t *testing.T, g *golden) *residencytest.MemSource {
	t.Helper()
	s := residencytest.NewMemSource()
	for _, n := range g.weights.Names() {
		d, shape := modeltest.TensorOf(t, g.weights, n)
		s.Put(n, shape, d)
	}
	return s
}

func TestMissingTensorIsNamed(t *testing.T) {
	g := loadGolden(t)
	const name = "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"
	src := goldenSource(t, g)
	src.Delete(name)
	r := newRig(t, nil, nil)
	m := New(g.cfg)
	err := r.ex.Register(m.Component("vae", src))
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("Register = %v, want an error naming %s", err, name)
	}
	if err := g.cfg.CheckSource(src); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("CheckSource = %v, want an error naming the missing %s", err, name)
	}
}

func TestMisshapenTensorIsNamed(t *testing.T) {
	g := loadGolden(t)
	tests := []struct {
		name  string
		shape []int
	}{
		{"decoder.up_blocks.1.resnets.0.conv_shortcut.weight", []int{16, 8, 1, 1}},
		{"decoder.mid_block.attentions.0.to_qkv.weight", []int{16, 48, 1, 1}},
		{"post_quant_conv.bias", []int{8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := goldenSource(t, g)
			n := tensor.NumElems(tt.shape)
			src.Put(tt.name, tt.shape, make([]float32, n))
			r := newRig(t, nil, nil)
			m := New(g.cfg)
			if err := r.ex.Register(m.DecoderComponent("vae", src)); err != nil {
				t.Fatal(err)
			}
			ops := r.ex.Ops("vae")
			z := ops.Zeros(1, 16, 1, 2, 2)
			defer z.Free()
			before := r.dev.Stats().Allocated
			out, err := m.Decode(r.ex, ops, z)
			if err == nil || !strings.Contains(err.Error(), tt.name) {
				t.Errorf("Decode = %v, want an error naming %s", err, tt.name)
			}
			if out != nil {
				t.Error("Decode returned a tensor with its error")
			}
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("a failed Decode left %d bytes allocated (had %d)", after, before)
			}
		})
	}
}

func TestRejectsBadInput(t *testing.T) {
	g := loadGolden(t)
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	ops := r.ex.Ops("vae")
	tests := []struct {
		name   string
		shape  []int
		encode bool
		want   string
	}{
		{"latent channels", []int{1, 15, 1, 2, 2}, false, "want float32 [B, 16, T, H, W]"},
		{"latent rank", []int{16, 1, 2, 2}, false, "want float32 [B, 16, T, H, W]"},
		{"no latent frames", []int{1, 16, 0, 2, 2}, false, "want float32"},
		{"video channels", []int{1, 4, 1, 8, 8}, true, "want float32 [B, 3, T, H, W]"},
		{"empty video", []int{1, 3, 1, 0, 8}, true, "want float32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := ops.Zeros(tt.shape...)
			defer x.Free()
			var err error
			var outs []*tensor.Tensor
			if tt.encode {
				mean, logvar, e := m.Encode(r.ex, ops, x)
				outs, err = []*tensor.Tensor{mean, logvar}, e
			} else {
				out, e := m.Decode(r.ex, ops, x)
				outs, err = []*tensor.Tensor{out}, e
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			for _, o := range outs {
				if o != nil {
					t.Error("a tensor came back with the error")
				}
			}
		})
	}
}

func TestHalfDeclaredModelRefuses(t *testing.T) {
	g := loadGolden(t)
	src := residency.SourceOf(g.weights)
	r := newRig(t, nil, nil)
	m := New(g.cfg)
	if err := r.ex.Register(m.EncoderComponent("vae", src)); err != nil {
		t.Fatal(err)
	}
	ops := r.ex.Ops("vae")
	z := ops.Zeros(1, 16, 1, 2, 2)
	defer z.Free()
	if _, err := m.Decode(r.ex, ops, z); err == nil || !strings.Contains(err.Error(), "decoder must be declared") {
		t.Errorf("Decode on an encoder-only model = %v", err)
	}
	m2 := New(g.cfg)
	if err := r.ex.Register(m2.DecoderComponent("vae2", src)); err != nil {
		t.Fatal(err)
	}
	v := ops.Zeros(1, 3, 1, 8, 8)
	defer v.Free()
	if _, _, err := m2.Encode(r.ex, ops, v); err == nil || !strings.Contains(err.Error(), "encoder must be declared") {
		t.Errorf("Encode on a decoder-only model = %v", err)
	}
}

func TestTilingValidation(t *testing.T) {
	g := loadGolden(t)
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	ops := r.ex.Ops("vae")
	z := ops.Zeros(1, 16, 1, 4, 4)
	defer z.Free()
	for _, tt := range []struct {
		tiling Tiling
		want   string
	}{
		{Tiling{MinHeight: 4, MinWidth: 32, StrideHeight: 4, StrideWidth: 16}, "at least 8 pixels"},
		{Tiling{MinHeight: 32, MinWidth: 32, StrideHeight: 40, StrideWidth: 16}, "leaves gaps"},
	} {
		out, err := m.DecodeTiled(r.ex, ops, z, tt.tiling)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeTiled(%+v) = %v, want an error containing %q", tt.tiling, err, tt.want)
		}
		out.Free()
	}
}

// TestOutOfMemoryLeavesNothing decodes on a device too small for the
// activations, with every block streamed without prefetch: Decode must
// fail with the allocator's error and leave nothing allocated.
func TestOutOfMemoryLeavesNothing(t *testing.T) {
	g := loadGolden(t)
	dev, host := cpu.NewDevice(2<<20), cpu.NewDevice(0)
	plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream}, "vae")
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, nil), HostBackend: cpu.New(host, nil), Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	m := New(g.cfg)
	if err := ex.Register(m.DecoderComponent("vae", residency.SourceOf(g.weights))); err != nil {
		t.Fatal(err)
	}
	ops := ex.Ops("vae")
	z := ops.Upload(modeltest.Randn(5, 16*2*16*16), 1, 16, 2, 16, 16)
	before := dev.Stats().Allocated
	out, err := m.Decode(ex, ops, z)
	if !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Errorf("Decode on a 2 MiB device = %v, want an out-of-memory error", err)
	}
	if out != nil {
		t.Error("Decode returned a tensor with its error")
	}
	ops.ClearErr()
	if after := dev.Stats().Allocated; after != before {
		t.Errorf("a failed Decode left %d bytes allocated (had %d)", after, before)
	}
	z.Free()
}
