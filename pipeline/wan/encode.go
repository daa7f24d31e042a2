package wan

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"ferry/model/wanvae"
	"ferry/pipeline"
	"ferry/residency"
)

// Encoding a training set (ferry cache): the text encoder and the VAE's
// encoder run once per sample so that training never holds either.

// RegisterEncoders declares what a latent cache needs with the executor:
// the text encoder and the VAE's encoder. The transformer and the VAE's
// decoder are not declared, so no plan ever moves their weights.
func (p *Pipeline) RegisterEncoders(ex *residency.Executor) error {
	for _, name := range []string{TextEncoder, VAE} {
		src, err := p.weightSource(name)
		if err != nil {
			return err
		}
		comp := p.vae.EncoderComponent(name, src)
		if name == TextEncoder {
			comp = p.text.Component(name, src)
		}
		if err := ex.Register(comp); err != nil {
			return err
		}
	}
	return nil
}

// EncodePrompt encodes prompt as Generate does (CleanPrompt, at most
// maxSeqLen tokens with </s>) and returns only its real tokens'
// embeddings, [n, text dim] row-major, and n. Generate's prompt embeddings
// are these rows followed by zeros up to maxSeqLen (WanPipeline's padding).
func (p *Pipeline) EncodePrompt(rt *pipeline.Runtime, prompt string, maxSeqLen int) ([]float32, int, error) {
	r := Request{Prompt: prompt, MaxSeqLen: maxSeqLen} // guidance 0: no negative prompt
	if maxSeqLen <= 0 {
		return nil, 0, fmt.Errorf("max sequence length must be > 0, got %d", maxSeqLen)
	}
	n := p.PromptTokens(r)
	pos, _, err := p.encodeText(rt, r)
	if err != nil {
		return nil, 0, err
	}
	d := len(pos) / maxSeqLen
	return append([]float32(nil), pos[:n*d]...), n, nil
}

// TextDim is the text encoder's embedding width.
func (p *Pipeline) TextDim() int { return p.text.Config().DModel }

// VAEConfig is the VAE's configuration (scales, latent statistics).
func (p *Pipeline) VAEConfig() wanvae.Config { return p.vaeCfg }

// EncodeVideo encodes video [3, F, H, W] (float32 in [-1, 1], F = 4k+1,
// H and W multiples of 8) with the VAE's encoder and returns the
// posterior's mean normalised as Wan trainers feed the transformer,
// (mean − latents_mean) / latents_std per channel (the inverse of what
// decode does), [z_dim, 1+(F−1)/4, H/8, W/8], and that shape. The plan's
// VAE tiling applies, as in decode.
func (p *Pipeline) EncodeVideo(rt *pipeline.Runtime, video []float32, f, h, w int) ([]float32, []int, error) {
	if f < 1 || (f-1)%4 != 0 || h <= 0 || w <= 0 || h%8 != 0 || w%8 != 0 {
		return nil, nil, fmt.Errorf("vae encode: video %dx%d, %d frames: want 4k+1 frames and sides that are multiples of 8", w, h, f)
	}
	if len(video) != 3*f*h*w {
		return nil, nil, fmt.Errorf("vae encode: %d values for [3, %d, %d, %d]", len(video), f, h, w)
	}
	end := rt.Phase(pipeline.PhaseVAE)
	defer end()
	// The mean, not a sample: the cache is deterministic.
	z, shape, err := p.vaeEncode(rt, video, f, h, w, p.OnFrame)
	if err != nil {
		return nil, nil, err
	}
	return z, append([]int(nil), shape[1:]...), nil
}

// fingerprintBytes is how much of each end of a weights file the
// fingerprint reads: enough to tell checkpoints apart, cheap for 10 GB.
const fingerprintBytes = 1 << 20

// EncoderFingerprint identifies what EncodePrompt and EncodeVideo compute
// with: the tokenizer's files, the text encoder's and the VAE's configs,
// and each of their weight files' name, size, and first and last MiB. A
// latent cache made with another fingerprint is stale.
func (p *Pipeline) EncoderFingerprint() (string, error) {
	h := sha256.New()
	for _, name := range []string{"tokenizer", TextEncoder, VAE} {
		c, err := p.folder.Component(name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "component %s\n", name)
		files, err := componentFiles(c.Dir)
		if err != nil {
			return "", err
		}
		for _, path := range files {
			if err := hashFile(h, path, name == "tokenizer" || filepath.Ext(path) == ".json"); err != nil {
				return "", err
			}
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// componentFiles lists a component folder's regular files, sorted.
func componentFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name()[0] != '.' {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// hashFile adds a file's name and size, and its whole content or (for
// weights) its first and last fingerprintBytes.
func hashFile(h io.Writer, path string, whole bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("fingerprint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("fingerprint: %w", err)
	}
	fmt.Fprintf(h, "file %s\n", filepath.Base(path))
	binary.Write(h, binary.LittleEndian, st.Size())
	size := st.Size()
	if whole || size <= 2*fingerprintBytes {
		_, err = io.Copy(h, f)
	} else {
		_, err = io.Copy(h, io.NewSectionReader(f, 0, fingerprintBytes))
		if err == nil {
			_, err = io.Copy(h, io.NewSectionReader(f, size-fingerprintBytes, fingerprintBytes))
		}
	}
	if err != nil {
		return fmt.Errorf("fingerprint %s: %w", path, err)
	}
	return nil
}
