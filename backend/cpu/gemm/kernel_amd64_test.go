//go:build amd64

package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"ferry/dtype"
)

func hasKernel(name string) bool {
	for _, kn := range archKernels() {
		if kn.name == name {
			return true
		}
	}
	return false
}

// BenchmarkKernel times the full-height micro-kernel alone on L1/L2-resident
// panels: the ceiling the driver can approach.
func BenchmarkKernel(b *testing.B) {
	for _, kn := range archKernels() {
		for _, kc := range []int{128, 256, 384, 512} {
			b.Run(fmt.Sprintf("%s/kc=%d", kn.name, kc), func(b *testing.B) {
				a := make([]float32, kn.mr*kc)
				bp := make([]float32, kn.nr*kc)
				c := make([]float32, kn.mr*kn.nr)
				f := kn.byRows[kn.mr-1]
				for i := 0; i < b.N; i++ {
					f(kc, &a[0], &bp[0], &c[0], kn.nr, 1, 1, 1<<kn.nr-1, loadC)
				}
				flops := 2 * float64(kn.mr*kn.nr*kc) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkPackB times packing one kc×n block of a transposed B (Linear
// weights) and of a plain one, in elements per nanosecond; n = 128 keeps
// the source in L2, n = 1536 streams it from memory.
func BenchmarkPackB(b *testing.B) {
	const k, kc = 1536, 512
	for _, n := range []int{128, 1536} {
		src := make([]float32, n*k)
		for i := range src {
			src[i] = float32(i)
		}
		for _, kn := range archKernels() {
			dst := make([]float32, kc*roundUp(n, kn.nr))
			for _, trans := range []bool{true, false} {
				b.Run(fmt.Sprintf("n=%d/%s/transB=%v", n, kn.name, trans), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						p0 := (i % 3) * kc
						if n < 1000 {
							p0 = 0
						}
						ldb := n // B stored k×n
						if trans {
							ldb = k // Bᵀ stored n×k
						}
						kn.packB(dst, src, ldb, trans, 0, n, p0, kc, 0, ceilDiv(n, kn.nr))
					}
					b.ReportMetric(float64(kc*n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
				})
			}
		}
	}
}

// BenchmarkBF16Kernel times the AVX512-BF16 micro-kernel alone, like
// BenchmarkKernel; one pair step is 4·mr·nr flops (two K steps).
func BenchmarkBF16Kernel(b *testing.B) {
	for _, kn := range archBF16Kernels() {
		for _, kc := range []int{128, 256, 384} {
			b.Run(fmt.Sprintf("%s/kc=%d", kn.name, kc), func(b *testing.B) {
				a := make([]float32, kn.mr*kc)
				bp := make([]float32, kn.nr*kc)
				c := make([]float32, kn.mr*kn.nr)
				f := kn.byRows[kn.mr-1]
				for i := 0; i < b.N; i++ {
					f(kc, &a[0], &bp[0], &c[0], kn.nr, 1, 1, 1<<kn.nr-1, loadC)
				}
				flops := 4 * float64(kn.mr*kn.nr*kc) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// The AVX2 kernel packs transposed A panels with copyRows8: every row
// count up to 8, row strides below and above 8, and nothing written past
// the panel (its unmasked steps write into the next step's place only).
func TestCopyRows8(t *testing.T) {
	if !hasKernel("avx2") {
		t.Skip("CPU lacks AVX2+FMA (or FERRY_CPU caps it): copyRows8 is not used here")
	}
	for rows := 1; rows <= 8; rows++ {
		for _, lda := range []int{rows, 8, 13} {
			if lda < rows {
				continue
			}
			for _, kc := range []int{1, 2, 5, 17} {
				src := make([]float32, (kc-1)*lda+rows)
				for i := range src {
					src[i] = float32(i + 1)
				}
				panel := make([]float32, kc*rows+9)
				for i := range panel {
					panel[i] = -1
				}
				avx2Kernel.packRowsContiguous(panel[:kc*rows], src, lda, 0, rows, 0, kc)
				for i, got := range panel {
					want := float32(-1)
					if i < kc*rows {
						want = src[(i/rows)*lda+i%rows]
					}
					if got != want {
						t.Fatalf("rows=%d lda=%d kc=%d: panel[%d] = %g, want %g", rows, lda, kc, i, got, want)
					}
				}
			}
		}
	}
}

// BenchmarkPackTransposedA times packing one 6-row panel of a transposed
// A (attention's and convolution's products) with the AVX2 kernel's
// copyRows8 and with a copy per step, interleaved.
func BenchmarkPackTransposedA(b *testing.B) {
	if !hasKernel("avx2") {
		b.Skip("CPU lacks AVX2+FMA")
	}
	const rows, kc, lda = 6, 256, 64
	src := make([]float32, kc*lda)
	panel := make([]float32, kc*rows)
	perStep := *avx2Kernel
	perStep.copyRows8 = false
	for _, v := range []struct {
		name string
		kn   *kernel
	}{{"copyRows8", avx2Kernel}, {"copy-per-step", &perStep}} {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				v.kn.packRowsContiguous(panel, src, lda, 0, rows, 0, kc)
			}
			b.ReportMetric(float64(rows*kc)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
		})
	}
}

// transpose16 (AVX-512) and transpose8 (AVX2) write the transpose of a
// rows×w block, missing rows as zero, storing the lanes their mask asks
// for: transpose16 a lane mask for every row, transpose8 the low rows
// lanes of its last row when maskLast is set, all 8 before.
func TestTransposes(t *testing.T) {
	const srcStride, dstStride = 19, 21
	for _, c := range []struct {
		kernel string
		w      int
		masks  func(rows int) []uint32
		run    func(dst, src []float32, rows int, mask uint32)
		stored func(p, r, rows int, mask uint32) bool
	}{
		{"avx512", 16, func(rows int) []uint32 { return []uint32{0xffff, 1<<rows - 1} },
			func(dst, src []float32, rows int, mask uint32) {
				transpose16(&dst[0], dstStride, &src[0], srcStride, rows, mask)
			},
			func(p, r, rows int, mask uint32) bool { return r < 16 && mask&(1<<r) != 0 }},
		{"avx2", 8, func(int) []uint32 { return []uint32{0, 1} },
			func(dst, src []float32, rows int, mask uint32) {
				transpose8(&dst[0], dstStride, &src[0], srcStride, rows, int(mask))
			},
			func(p, r, rows int, mask uint32) bool { return r < rows || r < 8 && (p < 7 || mask == 0) }},
	} {
		if !hasKernel(c.kernel) {
			t.Logf("CPU lacks %s (or FERRY_CPU caps it): its transpose is not used here", c.kernel)
			continue
		}
		src := make([]float32, c.w*srcStride)
		for i := range src {
			src[i] = float32(i + 1)
		}
		for rows := 1; rows <= c.w; rows++ {
			for _, mask := range c.masks(rows) {
				dst := make([]float32, c.w*dstStride)
				for i := range dst {
					dst[i] = -1
				}
				c.run(dst, src, rows, mask)
				for p := range c.w {
					for r := range dstStride {
						got := dst[p*dstStride+r]
						want := float32(-1) // untouched
						switch {
						case c.stored(p, r, rows, mask) && r < rows:
							want = src[r*srcStride+p]
						case c.stored(p, r, rows, mask):
							want = 0 // missing rows read as zero
						}
						if got != want {
							t.Fatalf("%s rows=%d mask=%#x: dst[%d][%d] = %g, want %g", c.kernel, rows, mask, p, r, got, want)
						}
					}
				}
			}
		}
	}
}

// roundPairsAVX512 gives dtype.F32ToBF16's bits for every kind of float32:
// random bit patterns (NaNs of both signs and payloads, infinities,
// subnormals, zeros), ties either way and values that round to infinity.
func TestRoundPairsAVX512(t *testing.T) {
	if !roundPairsVec() {
		t.Skip("CPU lacks AVX-512 (or FERRY_CPU caps it): roundPairsAVX512 is not used here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	special := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff,
		0x00000001, 0x807fffff, 0x7f7fffff, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0xbf808000, 0x0001ffff}
	const n = 1 << 16
	bits := make([]uint32, n)
	for i := range bits {
		if i < len(special) {
			bits[i] = special[i]
		} else {
			bits[i] = rng.Uint32()
		}
	}
	src := make([]float32, n)
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
	}
	got := make([]uint32, n/2)
	roundPairsAVX512(&got[0], &src[0], n/2)
	for p, w := range got {
		for h, v := range []uint16{uint16(w), uint16(w >> 16)} {
			if want := dtype.F32ToBF16(src[2*p+h]); v != want {
				t.Fatalf("float bits %#08x: bf16 %#04x, want %#04x", bits[2*p+h], v, want)
			}
		}
	}
}

// TestAVX2KC checks the AVX2 kernel's K block for the L1 sizes of the
// CPUs it runs on, and that the block of this CPU is the one its L1 asks
// for.
func TestAVX2KC(t *testing.T) {
	for _, c := range []struct{ l1, kc int }{
		{0, 256},        // CPUID does not say
		{32 << 10, 256}, // Zen 2 to 4, Skylake
		{48 << 10, 512}, // Zen 5, Intel cores since Ice Lake
		{40 << 10, 384}, // between: the largest block that fits
		{64 << 10, 512}, // capped: larger blocks were not measured
		{128 << 10, 512},
	} {
		if got := avx2KC(c.l1); got != c.kc {
			t.Errorf("avx2KC(%d KiB) = %d, want %d", c.l1>>10, got, c.kc)
		}
	}
	l1 := l1DataBytes()
	if l1 != 0 && (l1 < 16<<10 || l1 > 1<<20) {
		t.Errorf("CPUID says the L1 data cache is %d bytes: not a plausible size", l1)
	}
	if want, ok := sysfsL1Data(); ok && l1 != 0 && l1 != want {
		t.Errorf("CPUID says the L1 data cache is %d bytes, Linux says %d", l1, want)
	}
	if avx2Kernel.kc != avx2KC(l1) {
		t.Errorf("the AVX2 kernel blocks K by %d, this CPU's L1 (%d bytes) asks for %d", avx2Kernel.kc, l1, avx2KC(l1))
	}
	t.Logf("L1 data cache %d KiB: AVX2 K block %d", l1>>10, avx2Kernel.kc)
}

// sysfsL1Data reads the L1 data cache size Linux reports for CPU 0.
func sysfsL1Data() (int, bool) {
	for i := range 8 {
		dir := fmt.Sprintf("/sys/devices/system/cpu/cpu0/cache/index%d/", i)
		level, err1 := os.ReadFile(dir + "level")
		kind, err2 := os.ReadFile(dir + "type")
		size, err3 := os.ReadFile(dir + "size")
		if err1 != nil || err2 != nil || err3 != nil {
			return 0, false
		}
		if strings.TrimSpace(string(level)) != "1" || strings.TrimSpace(string(kind)) != "Data" {
			continue
		}
		kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(string(size)), "K"))
		return kib << 10, err == nil
	}
	return 0, false
}
