package synthetic

import (
	"os"
	"testing"
)

// tempRoot holds the model shared by the whole test binary.
var tempRoot string

func osMkdirTemp() (string, error) {
	dir, err := os.MkdirTemp("", "ferry-synthetic-test-*")
	tempRoot = dir
	return dir, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tempRoot != "" {
		os.RemoveAll(tempRoot)
	}
	os.Exit(code)
}
