package cli

import (
	"path/filepath"
	"testing"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/pipeline"
)

// --dtype auto is bf16 where the CPU multiplies bf16 natively, unless this
// machine's hardware profile measured the bf16 GEMM slower than the fp32
// one; a named dtype is taken as named.
func TestAutoComputeDType(t *testing.T) {
	for _, c := range []struct {
		name string
		gemm []hwprofile.GemmRate // nil: no profile
		want dtype.DType
	}{
		{"no profile", nil, pipeline.DefaultComputeDType()},
		{"bf16 measured faster", []hwprofile.GemmRate{{Name: "go", GFLOPS: 486}, {Name: "go-bf16", GFLOPS: 854}}, pipeline.DefaultComputeDType()},
		{"bf16 measured slower", []hwprofile.GemmRate{{Name: "go", GFLOPS: 316}, {Name: "go-bf16", GFLOPS: 198}}, dtype.F32},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", dir)
			if c.gemm != nil {
				here := hwprofile.ThisMachine()
				p := hwprofile.DefaultFor(here)
				p.Source, p.Machine, p.Gemm, p.GemmDefault = "measured", &here, c.gemm, "go"
				if err := hwprofile.Save(p, filepath.Join(dir, "ferry", "hardware.json")); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range []string{"auto", ""} {
				if got, err := parseComputeDType(s); err != nil || got != c.want {
					t.Errorf("--dtype %q: %v %v, want %v", s, got, err, c.want)
				}
			}
			for s, want := range map[string]dtype.DType{"bf16": dtype.BF16, "fp32": dtype.F32} {
				if got, err := parseComputeDType(s); err != nil || got != want {
					t.Errorf("--dtype %s: %v %v", s, got, err)
				}
			}
		})
	}
	if _, err := parseComputeDType("fp8"); err == nil {
		t.Error("--dtype fp8 accepted")
	}
}

// --dtype auto reads the hardware profile once: the dtype it chose stays
// when the profile changes later in the command.
func TestAutoComputeDTypeResolvedOnce(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	p := &planFlags{dtype: "auto"}
	first, err := p.computeDType()
	if err != nil {
		t.Fatal(err)
	}
	if p.dtype == "auto" {
		t.Fatal("--dtype auto was not resolved")
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	here := hwprofile.ThisMachine()
	prof := hwprofile.DefaultFor(here)
	prof.Source, prof.Machine, prof.GemmDefault = "measured", &here, "go"
	prof.Gemm = []hwprofile.GemmRate{{Name: "go", GFLOPS: 316}, {Name: "go-bf16", GFLOPS: 198}}
	if err := hwprofile.Save(prof, filepath.Join(dir, "ferry", "hardware.json")); err != nil {
		t.Fatal(err)
	}
	if again, err := p.computeDType(); err != nil || again != first {
		t.Errorf("second call: %v %v, want %v", again, err, first)
	}
}
