//go:build linux || darwin

package gemm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"ferry/backend/cpu/parallel"
)

// CBLAS enum values (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// openBLAS calls cblas_sgemm from a libopenblas loaded at run time.
// Debian's libopenblas0 uses 32-bit integers (libopenblas64 would not).
type openBLAS struct {
	sgemm func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32,
		b *float32, ldb int32, beta float32, c *float32, ldc int32)
	info BLASInfo
}

var (
	blasOnce sync.Once
	blasImpl *openBLAS
	blasErr  error
)

// OpenBLAS loads libopenblas once (see libraryCandidates), after choosing
// its core type from the CPU (see chooseCoreType), sets its thread count to
// the pool's, and returns it as an Impl. The error says what was tried when
// it is not installed.
func OpenBLAS() (Impl, error) {
	blasOnce.Do(func() { blasImpl, blasErr = loadOpenBLAS() })
	if blasErr != nil {
		return nil, blasErr
	}
	return blasImpl, nil
}

// OpenBLASInfo loads OpenBLAS if needed and describes it.
func OpenBLASInfo() (BLASInfo, error) {
	if _, err := OpenBLAS(); err != nil {
		return BLASInfo{}, err
	}
	return blasImpl.info, nil
}

// libraryCandidates lists the files to try: FERRY_OPENBLAS_LIB alone when
// set (an explicit choice; a missing file then means no OpenBLAS), else the
// usual names and Debian's paths.
func libraryCandidates() []string {
	if p := os.Getenv("FERRY_OPENBLAS_LIB"); p != "" {
		return []string{p}
	}
	if runtime.GOOS == "darwin" {
		return []string{"libopenblas.dylib", "libopenblas.0.dylib",
			"/opt/homebrew/opt/openblas/lib/libopenblas.dylib", "/usr/local/opt/openblas/lib/libopenblas.dylib"}
	}
	return []string{"libopenblas.so.0", "libopenblas.so",
		"/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"}
}

func loadOpenBLAS() (*openBLAS, error) {
	info := BLASInfo{}
	info.CoreType, info.CoreTypeReason = chooseCoreType(os.Getenv("FERRY_OPENBLAS_CORETYPE"), hostFeatures())
	if info.CoreType != "" {
		if err := setenvForC("OPENBLAS_CORETYPE", info.CoreType); err != nil {
			return nil, fmt.Errorf("gemm: openblas: %w", err)
		}
	}
	lib, path, err := openFirst(libraryCandidates())
	if err != nil {
		return nil, err
	}
	info.Path = path
	o := &openBLAS{info: info}
	sym, err := purego.Dlsym(lib, "cblas_sgemm")
	if err != nil {
		return nil, fmt.Errorf("gemm: openblas %s has no cblas_sgemm: %w", path, err)
	}
	purego.RegisterFunc(&o.sgemm, sym)
	o.configure(lib)
	return o, nil
}

// openFirst dlopens the first candidate that loads.
func openFirst(candidates []string) (uintptr, string, error) {
	var errs []string
	for _, p := range candidates {
		lib, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return lib, p, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", fmt.Errorf("gemm: openblas not found (install libopenblas0-pthread; tried %s): %s",
		strings.Join(candidates, ", "), strings.Join(errs, "; "))
}

// configure sets the thread count to the pool's and reads the optional
// reporting functions, skipping any this build lacks.
func (o *openBLAS) configure(lib uintptr) {
	if sym, err := purego.Dlsym(lib, "openblas_set_num_threads"); err == nil {
		var set func(int32)
		purego.RegisterFunc(&set, sym)
		o.info.Threads = parallel.Default().Workers()
		set(int32(o.info.Threads))
	}
	for _, s := range []struct {
		name string
		dst  *string
	}{{"openblas_get_corename", &o.info.CoreName}, {"openblas_get_config", &o.info.Config}} {
		if sym, err := purego.Dlsym(lib, s.name); err == nil {
			var get func() string
			purego.RegisterFunc(&get, sym)
			*s.dst = strings.TrimSpace(get())
		}
	}
}

// setenvForC sets an environment variable where C code reads it. os.Setenv
// reaches libc's environ only when the runtime has a C setenv hook (cgo,
// or purego's fake cgo with CGO_ENABLED=0); the libc getenv check below
// makes sure, and calls libc's setenv directly if it did not.
func setenvForC(key, value string) error {
	if err := os.Setenv(key, value); err != nil {
		return fmt.Errorf("setenv %s: %w", key, err)
	}
	libc, err := purego.Dlopen(libcName(), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("load libc to set %s: %w", key, err)
	}
	var getenv func(string) string
	var setenv func(string, string, int32) int32
	purego.RegisterLibFunc(&getenv, libc, "getenv")
	if getenv(key) == value {
		return nil
	}
	purego.RegisterLibFunc(&setenv, libc, "setenv")
	if setenv(key, value, 1) != 0 || getenv(key) != value {
		return errors.New("libc setenv " + key + " failed")
	}
	return nil
}

func libcName() string {
	if runtime.GOOS == "darwin" {
		return "/usr/lib/libSystem.B.dylib"
	}
	return "libc.so.6"
}

// Name is "openblas".
func (o *openBLAS) Name() string { return "openblas" }

// Sgemm calls cblas_sgemm (row-major). It panics with Check's error on
// inconsistent arguments rather than let OpenBLAS read out of bounds.
func (o *openBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := Check(transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil {
		panic(err)
	}
	for _, v := range [...]int{m, n, k, lda, ldb, ldc} {
		if v > math.MaxInt32 {
			panic(fmt.Errorf("gemm: openblas: size %d exceeds its 32-bit integers", v))
		}
	}
	if m == 0 || n == 0 {
		return
	}
	o.sgemm(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(m), int32(n), int32(k),
		alpha, first(a), int32(lda), first(b), int32(ldb), beta, first(c), int32(ldc))
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

func cblasOp(trans bool) int32 {
	if trans {
		return cblasTrans
	}
	return cblasNoTrans
}

// first is &s[0], or nil for an empty operand (k = 0), which OpenBLAS
// does not read.
func first(s []float32) *float32 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}
