package gemm

import (
	"runtime"
	"sync"
	"time"
)

// FMAPeak measures the fp32 FMA peak of the instruction set the default
// kernel uses (under FERRY_CPU's cap): a loop of independent FMAs on
// registers only, run on workers threads at once for about d, best of
// three rounds. It is the ceiling the GEMM's rate is judged against.
// It returns the rate in GFLOP/s and the kernel's name; 0 where the
// kernel is portable Go (no instruction set to measure).
func FMAPeak(workers int, d time.Duration) (gflops float64, kernel string) {
	kernel = kernels()[0].name
	loop, flops := fmaLoop(kernel)
	if loop == nil || workers < 1 {
		return 0, kernel
	}
	const chunk = 1 << 16 // iterations between clock reads: ~0.1 ms
	loop(chunk)           // wake the vector units before timing
	for range 3 {
		var wg sync.WaitGroup
		iters := make([]int, workers)
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				n := 0
				for time.Since(start) < d {
					loop(chunk)
					n += chunk
				}
				iters[w] = n // once: the workers share iters' cache line
			}()
		}
		wg.Wait()
		total := 0
		for _, n := range iters {
			total += n
		}
		gflops = max(gflops, float64(total)*flops/time.Since(start).Seconds()/1e9)
	}
	return gflops, kernel
}
