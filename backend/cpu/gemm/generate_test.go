package gemm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeUpToDate reruns internal/kerngen and compares with the
// committed assembly, so the generator and its output cannot drift apart.
func TestGeneratedCodeUpToDate(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH, cannot rerun the generator: %v", err)
	}
	dir := t.TempDir()
	asm, decl := filepath.Join(dir, "k.s"), filepath.Join(dir, "k.go")
	cmd := exec.Command(goTool, "run", "./internal/kerngen", "-asm", asm, "-go", decl)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/kerngen: %v\n%s", err, out)
	}
	for _, f := range [][2]string{{asm, "kernel_amd64.s"}, {decl, "kernel_amd64_gen.go"}} {
		fresh, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s differs from what internal/kerngen writes: run go generate ./backend/cpu/gemm", f[1])
		}
	}
}
