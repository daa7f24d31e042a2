package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVDPBF16PSEncoding assembles VDPBF16PS over registers that set every
// high bit of the EVEX encoding (R, R', X, B, V') with GNU as and compares
// its bytes with the BYTE directives kerngen writes. It skips where as
// and objdump are not installed.
func TestVDPBF16PSEncoding(t *testing.T) {
	asTool, err1 := exec.LookPath("as")
	objdump, err2 := exec.LookPath("objdump")
	if err1 != nil || err2 != nil {
		t.Skip("GNU as and objdump not installed: cannot check the encoding")
	}
	regs := []int{0, 7, 8, 15, 16, 23, 24, 31}
	type triple struct{ src2, src1, dst int }
	var cases []triple
	var src strings.Builder
	for _, a := range regs {
		for _, b := range regs {
			for _, d := range regs {
				cases = append(cases, triple{a, b, d})
				fmt.Fprintf(&src, "vdpbf16ps %%zmm%d, %%zmm%d, %%zmm%d\n", a, b, d)
			}
		}
	}
	dir := t.TempDir()
	in, obj := filepath.Join(dir, "v.s"), filepath.Join(dir, "v.o")
	if err := os.WriteFile(in, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(asTool, "-o", obj, in).CombinedOutput(); err != nil {
		t.Skipf("as cannot assemble AVX512-BF16 here: %v\n%s", err, out)
	}
	dump, err := exec.Command(objdump, "-d", obj).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var got [][]string
	sc := bufio.NewScanner(bytes.NewReader(dump))
	for sc.Scan() {
		// "   0:	62 92 1e 40 52 c6    	vdpbf16ps %zmm30,%zmm28,%zmm0"
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 || !strings.HasPrefix(strings.TrimSpace(fields[2]), "vdpbf16ps") {
			continue
		}
		got = append(got, strings.Fields(fields[1]))
	}
	if len(got) != len(cases) {
		t.Fatalf("objdump listed %d instructions, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		var want []string
		for _, part := range strings.Split(vdpbf16ps(c.src2, c.src1, c.dst), "; ") {
			want = append(want, strings.TrimPrefix(part, "BYTE $0x"))
		}
		if strings.Join(want, " ") != strings.Join(got[i], " ") {
			t.Errorf("VDPBF16PS Z%d, Z%d, Z%d: kerngen writes % s, as writes % s", c.src2, c.src1, c.dst, want, got[i])
		}
	}
}
