package cli

import (
	"sort"
	"strings"
	"testing"
)

// TestHelpPrintsUsageOnce: `ferry CMD -h` prints the command's usage once,
// on stdout, and exits 0, for every command.
func TestHelpPrintsUsageOnce(t *testing.T) {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		code, stdout, stderr := ferry(t, name, "-h")
		if code != ExitOK || strings.Count(stdout, "Usage:") != 1 || stderr != "" {
			t.Errorf("ferry %s -h: exit %d, %d usage blocks on stdout, stderr %q", name, code, strings.Count(stdout, "Usage:"), stderr)
		}
	}
}
