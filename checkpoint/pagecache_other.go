//go:build !linux

package checkpoint

import (
	"errors"
	"os"
)

// residentPages cannot ask this OS which pages are cached.
func residentPages(*os.File, int64) ([]byte, error) {
	return nil, errors.New("page cache residency is not available on this OS")
}

// probeDirect is not available here: the probe reads through the page
// cache.
func probeDirect([]probeChunk) (Probe, error) {
	return Probe{}, errors.New("direct reads are not available on this OS")
}
