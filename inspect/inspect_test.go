package inspect

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/dtype"
	"ferry/model/wan/wantest"
	"ferry/synth"
)

func TestFolderComplete(t *testing.T) {
	m, err := Folder(filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline", "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete {
		t.Fatalf("golden folder reported incomplete: %+v", m.Components)
	}
	var total int64
	for _, c := range m.Components {
		if len(c.Unexpected) > 0 {
			t.Errorf("%s: unexpected %v", c.Name, c.Unexpected)
		}
		total += c.Params
	}
	if total == 0 || m.LargestBlock == "" {
		t.Errorf("no params (%d) or largest block (%q)", total, m.LargestBlock)
	}
	var out bytes.Buffer
	m.WriteText(&out)
	for _, want := range []string{"WanTransformer3DModel", "UMT5EncoderModel", "AutoencoderKLWan", "complete", "read by row"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}

// TestImageEncoderChecked: an image-to-video folder's CLIP tower is
// checked against its config like the other weights: complete as written,
// and a dropped tensor is reported.
func TestImageEncoderChecked(t *testing.T) {
	m, err := Folder(filepath.Join("..", "pipeline", "wan", "testdata", "wan21_i2v_pipeline", "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range m.Components {
		if c.Name == "image_encoder" {
			found = c.Known && c.Params > 0 && len(c.Missing) == 0 && len(c.Unexpected) == 0
		}
	}
	if !found || !m.Complete {
		t.Fatalf("image encoder not checked complete: %+v", m.Components)
	}
	arch, err := synth.Lookup("wan-tiny-i2v")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range arch.Components {
		if c.Name == "image_encoder" {
			arch.Components[i].Params = c.Params[1:]
		}
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := synth.Write(dir, arch, synth.Options{DType: dtype.BF16}); err != nil {
		t.Fatal(err)
	}
	if m, err = Folder(dir); err != nil {
		t.Fatal(err)
	}
	if m.Complete {
		t.Error("an image encoder missing a tensor reported complete")
	}
}

// TestFolderFindsFaults drops one tensor from a synthesised transformer
// and renames another: inspect reports both.
func TestFolderFindsFaults(t *testing.T) {
	arch, err := synth.Lookup("wan-tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	for i, c := range arch.Components {
		if c.Name == "transformer" {
			ps := append([]string(nil), c.Params[0].Name, c.Params[1].Name)
			arch.Components[i].Params = c.Params[2:]
			arch.Components[i].Params = append(arch.Components[i].Params, c.Params[1])
			arch.Components[i].Params[len(arch.Components[i].Params)-1].Name = "stray.weight"
			t.Logf("dropped %v", ps)
		}
	}
	if err := synth.Write(dir, arch, synth.Options{DType: dtype.BF16}); err != nil {
		t.Fatal(err)
	}
	m, err := Folder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Complete {
		t.Fatal("incomplete folder reported complete")
	}
	for _, c := range m.Components {
		if c.Name != "transformer" {
			continue
		}
		if len(c.Missing) != 2 || len(c.Unexpected) != 1 || c.Unexpected[0] != "stray.weight" {
			t.Errorf("missing %v, unexpected %v", c.Missing, c.Unexpected)
		}
	}
}

func TestBuiltin(t *testing.T) {
	m, err := Builtin("wan2.1-t2v-14b")
	if err != nil {
		t.Fatal(err)
	}
	var transformer int64
	for _, c := range m.Components {
		if c.Name == "transformer" {
			transformer = c.Params
		}
	}
	// Wan2.1-T2V-14B's transformer has 14.29 billion parameters.
	if transformer < 14.0e9 || transformer > 14.5e9 {
		t.Errorf("14B transformer has %d params", transformer)
	}
	if !strings.HasPrefix(m.LargestBlock, "transformer.blocks.") && !strings.HasPrefix(m.LargestBlock, "text_encoder.block.") {
		t.Errorf("largest block %s", m.LargestBlock)
	}
}

// TestTorchCheckpointsComplete: the Wan 2.1 I2V golden folder with its
// image encoder, text encoder and VAE as the Wan repositories' .pth files
// (their own names) checks complete: every weight found, none unexpected.
func TestTorchCheckpointsComplete(t *testing.T) {
	src, _ := filepath.Abs(filepath.Join("..", "pipeline", "wan", "testdata", "wan21_i2v_pipeline", "pipeline"))
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch e.Name() {
		case "image_encoder":
			wantest.WriteOriginalCLIP(t, from, to, "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
		case "text_encoder":
			wantest.WriteTorchComponent(t, from, to, "models_t5_umt5-xxl-enc-bf16.pth", wantest.OriginalT5Name)
		case "vae":
			wantest.WriteTorchComponent(t, from, to, "Wan2.1_VAE.pth", wantest.OriginalVAEName)
		default:
			if err := os.Symlink(from, to); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := Folder(dst)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range m.Components {
		switch c.Name {
		case "image_encoder", "text_encoder", "vae":
			checked++
			if !c.Known || c.Params == 0 || len(c.Missing) > 0 || len(c.Unexpected) > 0 {
				t.Errorf("%s: known %v, %d params, missing %v, unexpected %v", c.Name, c.Known, c.Params, c.Missing, c.Unexpected)
			}
		}
	}
	if checked != 3 {
		t.Errorf("%d of the three rewritten components listed", checked)
	}
	if !m.Complete {
		t.Error("the .pth folder does not check complete")
	}
}
