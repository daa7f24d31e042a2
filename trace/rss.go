package trace

import (
	"sync"
	"time"
)

// SampleRSS records the process's resident set size as CounterRSS every
// interval (and once at the start and at the stop) until stop is called. On
// systems where RSS cannot be read it records nothing. Calling stop more than
// once is safe.
func (r *Recorder) SampleRSS(every time.Duration) (stop func()) {
	if r == nil || every <= 0 {
		return func() {}
	}
	sample := func() {
		if v, ok := residentBytes(); ok {
			r.Count(CounterRSS, v)
		}
	}
	sample()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				sample()
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
			sample()
		})
	}
}
