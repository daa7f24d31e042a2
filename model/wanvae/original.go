package wanvae

import (
	"fmt"
	"strconv"
	"strings"

	"ferry/checkpoint"
)

// Class is the diffusers class of the VAE's component.
const Class = "AutoencoderKLWan"

// The Wan repositories' own layout of the Wan VAEs opens with its names
// mapped to diffusers', as diffusers' converters map them: Wan 2.1's
// ("Wan2.1_VAE.pth", ComfyUI's wan_2.1_vae.safetensors:
// encoder.downsamples.N.residual.M, decoder.upsamples.N, middle, head,
// conv1/conv2 around the latent) and Wan 2.2's ("Wan2.2_VAE.pth",
// ComfyUI's wan2.2_vae.safetensors), whose levels nest their layers:
// encoder.downsamples.L.downsamples.N, decoder.upsamples.L.upsamples.N.
func init() {
	checkpoint.RegisterNaming(Class, checkpoint.Naming{Detect: originalLayout, Rename: diffusersName})
}

// originalLayout says names are the Wan repositories' VAE names.
func originalLayout(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "encoder.downsamples.") || strings.HasPrefix(n, "decoder.upsamples.") ||
			strings.HasPrefix(n, "decoder.middle.") || strings.HasPrefix(n, "encoder.middle.") {
			return true
		}
	}
	return false
}

// residualParts names the layers of a residual block by their index in the
// original Sequential: RMS norm, SiLU, conv, RMS norm, SiLU, dropout, conv.
var residualParts = map[string]string{
	"residual.0.gamma": "norm1.gamma", "residual.2.weight": "conv1.weight", "residual.2.bias": "conv1.bias",
	"residual.3.gamma": "norm2.gamma", "residual.6.weight": "conv2.weight", "residual.6.bias": "conv2.bias",
	"shortcut.weight": "conv_shortcut.weight", "shortcut.bias": "conv_shortcut.bias",
}

// middleParts are the middle block's: a residual block, attention, a
// residual block.
var middleParts = map[string]string{"0.": "resnets.0.", "1.": "attentions.0.", "2.": "resnets.1."}

// diffusersName maps one original VAE name to diffusers'. Names it does
// not know stay as they are (the checkpoint check then names them).
func diffusersName(n string) (string, bool) {
	switch n {
	case "conv1.weight", "conv1.bias":
		return "quant_conv." + strings.TrimPrefix(n, "conv1."), true
	case "conv2.weight", "conv2.bias":
		return "post_quant_conv." + strings.TrimPrefix(n, "conv2."), true
	}
	side, rest, ok := strings.Cut(n, ".")
	if !ok || (side != "encoder" && side != "decoder") {
		return n, true
	}
	switch {
	case strings.HasPrefix(rest, "conv1."):
		return side + ".conv_in." + strings.TrimPrefix(rest, "conv1."), true
	case rest == "head.0.gamma":
		return side + ".norm_out.gamma", true
	case strings.HasPrefix(rest, "head.2."):
		return side + ".conv_out." + strings.TrimPrefix(rest, "head.2."), true
	case strings.HasPrefix(rest, "middle."):
		return side + ".mid_block." + middleName(strings.TrimPrefix(rest, "middle.")), true
	case side == "encoder" && strings.HasPrefix(rest, "downsamples."):
		idx, tail, _ := strings.Cut(strings.TrimPrefix(rest, "downsamples."), ".")
		if inner, ok := strings.CutPrefix(tail, "downsamples."); ok {
			return "encoder.down_blocks." + idx + "." + levelName(inner, "downsample"), true
		}
		if r, ok := residualParts[tail]; ok {
			tail = r
		}
		return "encoder.down_blocks." + idx + "." + tail, true
	case side == "decoder" && strings.HasPrefix(rest, "upsamples."):
		idx, tail, _ := strings.Cut(strings.TrimPrefix(rest, "upsamples."), ".")
		if inner, ok := strings.CutPrefix(tail, "upsamples."); ok {
			return "decoder.up_blocks." + idx + "." + levelName(inner, "upsample"), true
		}
		return "decoder." + upsampleName(strings.TrimPrefix(rest, "upsamples.")), true
	}
	return n, true
}

// levelName maps a layer of one Wan 2.2 VAE level ("N.residual.2.weight",
// "N.resample.1.bias") to its diffusers name within the level: residual
// blocks are resnets.N, and the resampler, whatever its index (the last),
// is the level's downsampler or upsampler (word). Names it does not know
// keep their original form.
func levelName(inner, word string) string {
	idx, tail, _ := strings.Cut(inner, ".")
	if r, ok := residualParts[tail]; ok {
		return "resnets." + idx + "." + r
	}
	if strings.HasPrefix(tail, "resample.") || strings.HasPrefix(tail, "time_conv.") {
		return word + "r." + tail
	}
	return word + "s." + inner
}

// middleName maps "0.residual.2.weight" to "resnets.0.conv1.weight" and
// "1.to_qkv.weight" to "attentions.0.to_qkv.weight".
func middleName(rest string) string {
	for from, to := range middleParts {
		if tail, ok := strings.CutPrefix(rest, from); ok {
			if r, ok := residualParts[tail]; ok {
				tail = r
			}
			return to + tail
		}
	}
	return rest
}

// upsampleName maps a decoder upsample index to diffusers' up blocks:
// residual blocks 0-2, 4-6, 8-10 and 12-14 are up block 0-3's resnets,
// 3, 7 and 11 their upsamplers, and block 4's shortcut is up block 1's
// first resnet's.
func upsampleName(rest string) string {
	idx, tail, _ := strings.Cut(rest, ".")
	b, err := strconv.Atoi(idx)
	if err != nil || b < 0 {
		return "upsamples." + rest
	}
	if r, ok := residualParts[tail]; ok && b%4 != 3 && b < 15 {
		return fmt.Sprintf("up_blocks.%d.resnets.%d.%s", b/4, b%4, r)
	}
	if (strings.HasPrefix(tail, "resample.") || strings.HasPrefix(tail, "time_conv.")) && b%4 == 3 && b < 12 {
		return fmt.Sprintf("up_blocks.%d.upsamplers.0.%s", b/4, tail)
	}
	return "up_blocks." + rest
}
