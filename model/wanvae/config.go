// Package wanvae is the Wan video VAE, diffusers' AutoencoderKLWan, in
// both of its layouts: Wan 2.1 (is_residual false, no patching, 8×
// spatial) and Wan 2.2 (TI2V-5B: is_residual true, patch_size 2, 16×
// spatial; see residual.go).
//
// The decoder turns latents [B, z_dim, T, h, w] into video
// [B, 3, 1+4(T-1), s·h, s·w] (s = Config.SpatialScale): one latent frame at a time, every causal 3-D
// convolution keeping the last two frames of its input between frames
// (diffusers' feat_cache), the temporal upsamplers passing the first frame
// through unchanged. The encoder reads frames in chunks of 1, 4, 4, ...
// and returns the latent distribution's mean and log-variance. Both have
// tiled variants that blend overlapping spatial tiles exactly as diffusers'
// tiled_decode and tiled_encode do.
//
// The model is declared as residency blocks in execution order. Encoder:
// "encoder.in" (conv_in), "encoder.down.K" (one per diffusers
// encoder.down_blocks.K: a residual block or a downsampler),
// "encoder.mid", "encoder.out" (norm_out, conv_out and quant_conv).
// Decoder: "decoder.in" (post_quant_conv and conv_in), "decoder.mid",
// "decoder.up.I.res.J" and "decoder.up.I.upsample" (the residual blocks and
// the upsampler of up_blocks.I), "decoder.out" (norm_out, conv_out). The
// decoder runs every one of its blocks once per latent frame. The Wan 2.2
// layout keeps this scheme: its encoder.down.K are the residual blocks and
// downsamplers of every WanResidualDownBlock in execution order (K counts
// across levels), its decoder.up.I.res.J and decoder.up.I.upsample the
// resnets and upsampler of WanResidualUpBlock I. The parameter-free
// shortcuts need no blocks of their own: a level's average-down shortcut
// is taken in its first encoder.down block and added in its last; the
// decoder level's input is kept from its first res block and duplicated
// up in its upsample block. The video is patched into channels per chunk
// before the encoder and unpatched per frame after the decoder.
package wanvae

import (
	"encoding/json"
	"fmt"
)

// Config is a vae/config.json of AutoencoderKLWan.
type Config struct {
	BaseDim            int       `json:"base_dim"`
	DecoderBaseDim     *int      `json:"decoder_base_dim"`
	ZDim               int       `json:"z_dim"`
	DimMult            []int     `json:"dim_mult"`
	NumResBlocks       int       `json:"num_res_blocks"`
	AttnScales         []float64 `json:"attn_scales"`
	TemperalDownsample []bool    `json:"temperal_downsample"`
	Dropout            float64   `json:"dropout"`
	LatentsMean        []float64 `json:"latents_mean"`
	LatentsStd         []float64 `json:"latents_std"`
	IsResidual         bool      `json:"is_residual"`
	// InChannels and OutChannels are the encoder's input and the decoder's
	// output channels after patching (12 for Wan 2.2: 3 colours × 2 × 2),
	// as diffusers 0.40 reads them.
	InChannels  int  `json:"in_channels"`
	OutChannels int  `json:"out_channels"`
	PatchSize   *int `json:"patch_size"`
	// ScaleFactorSpatial and ScaleFactorTemporal, when present, must agree
	// with the geometry the other keys imply.
	ScaleFactorSpatial  *int `json:"scale_factor_spatial"`
	ScaleFactorTemporal *int `json:"scale_factor_temporal"`
	// ClipOutput is in Wan2.2-TI2V-5B's config.json; diffusers ignores it
	// (and always clamps the decoded video), and so does ferry.
	ClipOutput *bool `json:"clip_output"`
}

// wan21Mean and wan21Std are the per-channel latent statistics of the Wan
// 2.1 VAE (AutoencoderKLWan's defaults).
var (
	wan21Mean = []float64{
		-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
		0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
	}
	wan21Std = []float64{
		2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
		3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
	}
)

// ConfigWan21 is the VAE of Wan-AI/Wan2.1-T2V-*-Diffusers (the
// constructor defaults of AutoencoderKLWan).
func ConfigWan21() Config {
	return Config{
		BaseDim:            96,
		ZDim:               16,
		DimMult:            []int{1, 2, 4, 4},
		NumResBlocks:       2,
		AttnScales:         []float64{},
		TemperalDownsample: []bool{false, true, true},
		LatentsMean:        append([]float64(nil), wan21Mean...),
		LatentsStd:         append([]float64(nil), wan21Std...),
		InChannels:         3,
		OutChannels:        3,
	}
}

// wan22Mean and wan22Std are the latent statistics of the Wan 2.2 VAE
// (Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json).
var (
	wan22Mean = []float64{
		-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
		-0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
		-0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
		-0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
		-0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
		0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
	}
	wan22Std = []float64{
		0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
		0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
		0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
		0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
		0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
		0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
	}
)

// ConfigWan22 is the VAE of Wan-AI/Wan2.2-TI2V-5B-Diffusers (its
// vae/config.json): residual blocks, 2×2 patching, z_dim 48, 16× spatial.
func ConfigWan22() Config {
	decoderBase, patch, spatial, temporal, clip := 256, 2, 16, 4, false
	return Config{
		BaseDim:             160,
		DecoderBaseDim:      &decoderBase,
		ZDim:                48,
		DimMult:             []int{1, 2, 4, 4},
		NumResBlocks:        2,
		AttnScales:          []float64{},
		TemperalDownsample:  []bool{false, true, true},
		LatentsMean:         append([]float64(nil), wan22Mean...),
		LatentsStd:          append([]float64(nil), wan22Std...),
		IsResidual:          true,
		InChannels:          12,
		OutChannels:         12,
		PatchSize:           &patch,
		ScaleFactorSpatial:  &spatial,
		ScaleFactorTemporal: &temporal,
		ClipOutput:          &clip,
	}
}

// ParseConfig reads a config.json, fills missing keys with the reference's
// constructor defaults and validates the result.
func ParseConfig(raw []byte) (Config, error) {
	c := ConfigWan21()
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("wanvae config: %w", err)
	}
	// A null list in config.json (which leaves the slice nil) means "the
	// default" to the reference.
	if c.LatentsMean == nil {
		c.LatentsMean = append([]float64(nil), wan21Mean...)
	}
	if c.LatentsStd == nil {
		c.LatentsStd = append([]float64(nil), wan21Std...)
	}
	return c, c.Validate()
}

// Validate says what is wrong with a config.
// maxDim bounds every size and count of a config: far above any released
// model, low enough that a damaged config.json is refused with one line
// instead of sizing the model's tables (a num_layers of 1e9 ran the
// process out of memory).
const maxDim = 1 << 16

func (c Config) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{
		{"base_dim", c.BaseDim}, {"decoder_base_dim", c.decoderBaseDim()}, {"z_dim", c.ZDim},
		{"num_res_blocks", c.NumResBlocks}, {"in_channels", c.InChannels}, {"out_channels", c.OutChannels},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("wanvae config: %s must be 1 to %d, got %d", f.key, maxDim, f.v)
		}
	}
	if len(c.DimMult) < 1 || len(c.DimMult) > 64 {
		return fmt.Errorf("wanvae config: dim_mult has %d levels, want 1 to 64", len(c.DimMult))
	}
	for i, m := range c.DimMult {
		if m <= 0 {
			return fmt.Errorf("wanvae config: dim_mult[%d] must be > 0, got %d", i, m)
		}
	}
	// The reference reads temperal_downsample[i] for every level but the
	// last, and halves the channels at every upsampler.
	if len(c.TemperalDownsample) != len(c.DimMult)-1 {
		return fmt.Errorf("wanvae config: temperal_downsample has %d entries, want %d (one per dim_mult level but the last)",
			len(c.TemperalDownsample), len(c.DimMult)-1)
	}
	if c.IsResidual {
		if err := c.validateShortcuts(); err != nil {
			return err
		}
	} else {
		for i, d := range c.decoderDims() {
			if i > 0 && i < len(c.DimMult) && d%2 != 0 {
				return fmt.Errorf("wanvae config: decoder level %d has %d channels, which the upsampler cannot halve", i, d)
			}
		}
	}
	if len(c.AttnScales) != 0 {
		return fmt.Errorf("wanvae config: attn_scales %v is not supported (Wan 2.1 has none)", c.AttnScales)
	}
	if err := c.validatePatch(); err != nil {
		return err
	}
	if len(c.LatentsMean) != c.ZDim || len(c.LatentsStd) != c.ZDim {
		return fmt.Errorf("wanvae config: latents_mean has %d and latents_std %d values, want z_dim = %d each",
			len(c.LatentsMean), len(c.LatentsStd), c.ZDim)
	}
	for i, s := range c.LatentsStd {
		if !(s > 0) {
			return fmt.Errorf("wanvae config: latents_std[%d] must be > 0, got %g", i, s)
		}
	}
	return nil
}

// validatePatch checks patch_size against the channels it splits and the
// optional scale_factor_* keys against the geometry.
func (c Config) validatePatch() error {
	if c.PatchSize != nil && *c.PatchSize <= 0 {
		return fmt.Errorf("wanvae config: patch_size must be > 0 (or null), got %d", *c.PatchSize)
	}
	pp := c.patch() * c.patch()
	if c.InChannels%pp != 0 || c.OutChannels%pp != 0 {
		return fmt.Errorf("wanvae config: in_channels %d and out_channels %d must be multiples of patch_size² = %d (they count the patched channels)",
			c.InChannels, c.OutChannels, pp)
	}
	if s := c.ScaleFactorSpatial; s != nil && *s != c.SpatialScale() {
		return fmt.Errorf("wanvae config: scale_factor_spatial %d, but patch_size and temperal_downsample give %d", *s, c.SpatialScale())
	}
	if s := c.ScaleFactorTemporal; s != nil && *s != c.TemporalScale() {
		return fmt.Errorf("wanvae config: scale_factor_temporal %d, but temperal_downsample gives %d", *s, c.TemporalScale())
	}
	return nil
}

// patch is the side of the square patches folded into channels (1: none).
func (c Config) patch() int {
	if c.PatchSize != nil && *c.PatchSize > 1 {
		return *c.PatchSize
	}
	return 1
}

// VideoChannels is the number of colour channels of the video Encode
// reads and Decode writes (in_channels / patch_size²).
func (c Config) VideoChannels() int { return c.InChannels / (c.patch() * c.patch()) }

func (c Config) decoderBaseDim() int {
	if c.DecoderBaseDim != nil {
		return *c.DecoderBaseDim
	}
	return c.BaseDim
}

// encoderDims are the encoder's channels: conv_in's output, then each
// level's.
func (c Config) encoderDims() []int {
	dims := []int{c.BaseDim}
	for _, m := range c.DimMult {
		dims = append(dims, c.BaseDim*m)
	}
	return dims
}

// decoderDims are the decoder's channels: conv_in's output (the widest),
// then each up level's, from the deepest to the shallowest.
func (c Config) decoderDims() []int {
	d := c.decoderBaseDim()
	dims := []int{d * c.DimMult[len(c.DimMult)-1]}
	for i := len(c.DimMult) - 1; i >= 0; i-- {
		dims = append(dims, d*c.DimMult[i])
	}
	return dims
}

// temporalUpsample reports whether decoder up level i doubles the frames
// (the reverse of temperal_downsample).
func (c Config) temporalUpsample(i int) bool {
	return c.TemperalDownsample[len(c.TemperalDownsample)-1-i]
}

// SpatialScale is how many pixels one latent covers in height and width
// (8 for Wan 2.1, 16 for Wan 2.2: 2 of patching, 8 of the encoder).
func (c Config) SpatialScale() int { return c.patch() << len(c.TemperalDownsample) }

// encoderScale is the spatial downsampling of the encoder alone, from
// patched pixels to latents.
func (c Config) encoderScale() int { return 1 << len(c.TemperalDownsample) }

// TemporalScale is how many frames one latent frame after the first
// covers (4 for Wan 2.1).
func (c Config) TemporalScale() int {
	s := 1
	for _, t := range c.TemperalDownsample {
		if t {
			s *= 2
		}
	}
	return s
}

// EncodedFrames is the number of latent frames Encode makes of f frames:
// the first frame alone gives one; each later chunk of four (diffusers
// chunks by four whatever the temporal scale) passes every temporal
// downsampling's causal stride-2 convolution (kernel 3) over its cached
// last frame and itself, n frames becoming (n+1-3)//2+1.
func (c Config) EncodedFrames(f int) int {
	if f <= 0 {
		return 0
	}
	n := encodeChunk
	for _, down := range c.TemperalDownsample {
		switch {
		case !down:
		case n < 2: // a convolution of kernel 3 over n+1 < 3 frames
			n = 0
		default:
			n = (n-2)/2 + 1
		}
	}
	return 1 + n*(encodeChunks(f)-1)
}

// DecodedFrames is the number of frames Decode makes of t latent frames.
func (c Config) DecodedFrames(t int) int {
	if t <= 0 {
		return 0
	}
	return 1 + c.TemporalScale()*(t-1)
}

// Denormalize turns the denoiser's latents z [B, z_dim, ...] (row-major,
// shape given) into the VAE's latent space in place, as WanPipeline does
// before decoding: z / (1/std) + mean per channel, in float32.
func (c Config) Denormalize(z []float32, shape []int) error {
	return c.perChannel(z, shape, func(v float32, ch int) float32 {
		inv := 1 / float32(c.LatentsStd[ch])
		return v/inv + float32(c.LatentsMean[ch])
	})
}

// Normalize is the inverse of Denormalize, as Wan's image-to-video
// pipelines apply it to encoded latents: (z - mean) · (1/std).
func (c Config) Normalize(z []float32, shape []int) error {
	return c.perChannel(z, shape, func(v float32, ch int) float32 {
		inv := 1 / float32(c.LatentsStd[ch])
		return (v - float32(c.LatentsMean[ch])) * inv
	})
}

func (c Config) perChannel(z []float32, shape []int, f func(v float32, ch int) float32) error {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if len(shape) < 2 || shape[1] != c.ZDim || n != len(z) || len(c.LatentsMean) != c.ZDim || len(c.LatentsStd) != c.ZDim {
		return fmt.Errorf("wanvae: latents %v (%d values) are not [B, %d, ...] with statistics for every channel", shape, len(z), c.ZDim)
	}
	inner := n / shape[0] / shape[1]
	for i := range z {
		z[i] = f(z[i], i/inner%c.ZDim)
	}
	return nil
}
