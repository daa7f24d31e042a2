package checkpoint

import "fmt"

// FormatError reports a checkpoint file whose content is wrong: a header
// that does not parse, an offset past the end, an index naming a tensor its
// shard lacks. Errors from the OS (missing file, permission) are returned
// wrapped as they are, so errors.Is(err, fs.ErrNotExist) works.
type FormatError struct {
	File   string // the file at fault
	Reason string // what is wrong, in one line
	Err    error  // underlying cause, if any
}

func (e *FormatError) Error() string { return fmt.Sprintf("%s: %s", e.File, e.Reason) }

// Unwrap returns the underlying cause, if any.
func (e *FormatError) Unwrap() error { return e.Err }

// formatErr builds a *FormatError with a formatted reason.
func formatErr(file, format string, args ...any) *FormatError {
	return &FormatError{File: file, Reason: fmt.Sprintf(format, args...)}
}
