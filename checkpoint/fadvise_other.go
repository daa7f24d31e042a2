//go:build unix && !linux && !freebsd

package checkpoint

import "os"

// fadviseDontNeed is a no-op where posix_fadvise is not offered; dropping
// the mapping with madvise still lowers RSS.
func fadviseDontNeed(*os.File, int64, int64) error { return nil }
