//go:build !(linux || freebsd)

package hwprofile

import (
	"errors"
	"os"
)

// dropCache is not available here: the disk figure is then suspect.
func dropCache(*os.File, int64) error { return errors.New("no fadvise") }
