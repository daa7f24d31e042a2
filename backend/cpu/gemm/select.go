package gemm

import (
	"fmt"
	"os"
	"sync"
)

var (
	defaultGoOnce sync.Once
	defaultGo     *Go
)

// DefaultGo is the process-wide Go GEMM (best kernel, default pool), so
// every user shares its packing buffers.
func DefaultGo() *Go {
	defaultGoOnce.Do(func() { defaultGo = NewGo(nil) })
	return defaultGo
}

// Available lists the implementations usable here, fastest first:
// "openblas" when it loads, "go", then "naive". For calibrate and bench.
func Available() []Impl {
	var impls []Impl
	if o, err := OpenBLAS(); err == nil {
		impls = append(impls, o)
	}
	return append(impls, DefaultGo(), Naive{})
}

// Select returns the implementation named "openblas", "go" or "naive"; ""
// means the default: go wherever its AVX-512 or AVX2 kernel runs (every
// x86-64 CPU of the last decade), else OpenBLAS when it loads, else go.
// Our GEMM runs on the one thread pool every other kernel uses, whereas
// OpenBLAS's own threads spin for ~80 ms after each call and take the
// cores from the convolutions and attention that follow (24% of a
// wan-tiny run's CPU samples); it packs weights once, and keeps bf16,
// fp16 and fp8 weights in their storage dtype (Stored), which OpenBLAS
// cannot multiply; and it needs no library installed. OpenBLAS stays
// selectable (FERRY_GEMM=openblas) and in calibrate's comparison.
func Select(name string) (Impl, error) {
	switch name {
	case "":
		if g := DefaultGo(); g.Kernel() == "avx512" || g.Kernel() == "avx2" {
			return g, nil
		}
		if o, err := OpenBLAS(); err == nil {
			return o, nil
		}
		return DefaultGo(), nil
	case "openblas":
		return OpenBLAS()
	case "go":
		return DefaultGo(), nil
	case "naive":
		return Naive{}, nil
	}
	return nil, fmt.Errorf("gemm: unknown implementation %q (want openblas, go or naive)", name)
}

// EnvWarning is the one line to show when FERRY_GEMM names an
// implementation that is unknown or does not load, so that Best runs the
// default instead ("" otherwise).
func EnvWarning() string {
	name := os.Getenv("FERRY_GEMM")
	if name == "" {
		return ""
	}
	_, err := Select(name)
	switch {
	case err == nil:
		return ""
	case name == "openblas":
		// The loader's error lists every path it tried; the fix is one.
		return fmt.Sprintf("FERRY_GEMM=openblas: OpenBLAS does not load here; running %s instead (install it with FERRY_GEMM=openblas make deps, or unset FERRY_GEMM)", Best().Name())
	}
	return fmt.Sprintf("FERRY_GEMM=%s: %v; running %s instead", name, err, Best().Name())
}

// Best is Select(FERRY_GEMM). When the variable names something unknown or
// unloadable it falls back to the default; callers that must report that
// call Select themselves.
func Best() Impl {
	if impl, err := Select(os.Getenv("FERRY_GEMM")); err == nil {
		return impl
	}
	impl, _ := Select("")
	return impl
}
