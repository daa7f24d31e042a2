//go:build !linux

package checkpoint

import (
	"errors"
	"os"
)

// pageCacheBytes cannot ask this OS which pages are cached.
func pageCacheBytes(*os.File, int64) (int64, error) {
	return 0, errors.New("page cache residency is not available on this OS")
}
