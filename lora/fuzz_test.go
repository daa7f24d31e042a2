package lora

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/dtype"
)

// FuzzParseKey: any name is placed or refused in one line, and what is
// placed is a diffusers module name that places itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"transformer.blocks.0.attn1.to_q.lora_A.weight",
		"diffusion_model.blocks.12.cross_attn.k_img.lora_up.weight",
		"lora_unet_blocks_3_ffn_2.alpha",
		"base_model.model.proj_out.lora_B.default.weight",
		"diffusion_model.time_projection.1.diff_b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		mod, p, err := parseKey(name)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q is not one line", err)
			}
			return
		}
		if p < partA || p >= numParts || p == partDiff && mod != diffHead {
			t.Fatalf("part %d of %q", p, mod)
		}
		again, p2, err := parseKey(mod + ".lora_B.weight")
		if err != nil || again != mod || p2 != partB {
			t.Fatalf("%q placed as %q, which places as %q, %v", name, mod, again, err)
		}
	})
}

// FuzzRead fuzzes the safetensors header of a file handed to Read (names,
// dtypes, shapes, metadata) behind a correct length prefix and dataLen
// bytes of data, so the fuzzer spends its time past the prefix: Read must
// never panic, refuse in one line naming the file, and return only
// consistent adapters.
func FuzzRead(f *testing.F) {
	q := "blocks.0.attn1.to_q"
	seeds := [][]raw{
		pairOf(q+".lora_A.weight", q+".lora_B.weight", dtype.F32),
		append(pairOf("lora_unet_blocks_0_ffn_0.lora_down.weight", "lora_unet_blocks_0_ffn_0.lora_up.weight", dtype.BF16),
			alphaOf("lora_unet_blocks_0_ffn_0.alpha", dtype.F32, nil, 4)),
	}
	for _, s := range seeds {
		data, err := os.ReadFile(writeRaw(f, s, map[string]string{metadataKey: `{"transformer.lora_alpha": 8, "transformer.alpha_pattern": {"to_q": 2}}`}))
		if err != nil {
			f.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(data)
		f.Add(string(data[8:8+n]), uint8(len(data)-8-int(n)))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, header string, dataLen uint8) {
		data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		data = append(data, header...)
		for i := range int(dataLen) {
			data = append(data, byte(0x3c+i%3)) // finite floats of every width
		}
		path := filepath.Join(dir, "fuzz.safetensors")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ads, err := Read(path)
		if err != nil {
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") || !strings.Contains(msg, path) {
				t.Fatalf("error %q is not one line naming the file", msg)
			}
			return
		}
		for _, a := range ads {
			if a.Rank <= 0 || len(a.A) != a.Rank*a.In || len(a.B) != a.Out*a.Rank {
				t.Fatalf("%s: rank %d in %d out %d with %d and %d values", a.Module, a.Rank, a.In, a.Out, len(a.A), len(a.B))
			}
			if m, _, err := parseKey(a.Module + ".lora_A.weight"); err != nil || m != a.Module {
				t.Fatalf("module %q is not a diffusers name", a.Module)
			}
			if !finite(a.Alpha) {
				t.Fatalf("%s: alpha %g", a.Module, a.Alpha)
			}
		}
	})
}

// FuzzMetadata: any lora_adapter_metadata text is understood or refused
// in one line.
func FuzzMetadata(f *testing.F) {
	f.Add(`{"transformer.r": 4, "transformer.lora_alpha": 8, "transformer.alpha_pattern": {"blocks.0.attn1.to_q": 2}}`)
	f.Add(`{"lora_alpha": 3, "use_rslora": true, "alpha_pattern": {"(": 1}}`)
	f.Fuzz(func(t *testing.T, s string) {
		fn, err := metadataAlpha(map[string]string{metadataKey: s})
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q is not one line", err)
			}
			return
		}
		if fn != nil {
			fn("blocks.0.attn1.to_q", 4) // readPair refuses what is not finite
		}
	})
}
