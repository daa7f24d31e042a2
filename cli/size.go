package cli

import (
	"strconv"

	"ferry/units"
)

// sizeFlag is a flag.Value holding a size.
type sizeFlag struct {
	bytes int64
	set   bool
}

func (f *sizeFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.FormatInt(f.bytes, 10)
}

func (f *sizeFlag) Set(s string) error {
	b, err := units.ParseSize(s)
	if err != nil {
		return err
	}
	f.bytes, f.set = b, true
	return nil
}
