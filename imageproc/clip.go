package imageproc

import (
	"encoding/json"
	"fmt"
	"math"
)

// CLIPConfig is what CLIPImageProcessor reads from a
// preprocessor_config.json (transformers 4.47), defaults filled in.
// Exactly one of ShortestEdge and (Height, Width) sizes the resize.
type CLIPConfig struct {
	DoResize     bool
	ShortestEdge int // resize the shorter side to this, keeping the aspect ratio
	Height       int // or resize to exactly Height×Width
	Width        int
	Resample     Filter

	DoCenterCrop          bool
	CropHeight, CropWidth int
	DoRescale             bool
	RescaleFactor         float64
	DoNormalize           bool
	Mean, Std             [3]float64
}

// OpenAI CLIP's normalisation, CLIPImageProcessor's defaults.
var (
	clipMean = [3]float64{0.48145466, 0.4578275, 0.40821073}
	clipStd  = [3]float64{0.26862954, 0.26130258, 0.27577711}
)

// DefaultCLIPConfig is CLIPImageProcessor() with no arguments: shortest
// edge 224, bicubic, center crop 224, rescale 1/255, CLIP mean and std.
func DefaultCLIPConfig() CLIPConfig {
	return CLIPConfig{
		DoResize: true, ShortestEdge: 224, Resample: Bicubic,
		DoCenterCrop: true, CropHeight: 224, CropWidth: 224,
		DoRescale: true, RescaleFactor: 1.0 / 255,
		DoNormalize: true, Mean: clipMean, Std: clipStd,
	}
}

// rawCLIPConfig is the JSON; pointers tell a missing key from a zero one.
type rawCLIPConfig struct {
	DoResize      *bool           `json:"do_resize"`
	Size          json.RawMessage `json:"size"`
	Resample      *int            `json:"resample"`
	DoCenterCrop  *bool           `json:"do_center_crop"`
	CropSize      json.RawMessage `json:"crop_size"`
	DoRescale     *bool           `json:"do_rescale"`
	RescaleFactor *float64        `json:"rescale_factor"`
	DoNormalize   *bool           `json:"do_normalize"`
	ImageMean     json.RawMessage `json:"image_mean"`
	ImageStd      json.RawMessage `json:"image_std"`
}

// sizeDict is transformers' size dict: {"shortest_edge": n},
// {"height": h, "width": w}, or a bare int (legacy).
type sizeDict struct {
	ShortestEdge *int `json:"shortest_edge"`
	Height       *int `json:"height"`
	Width        *int `json:"width"`
}

// ParseCLIPConfig reads a preprocessor_config.json for CLIPImageProcessor.
func ParseCLIPConfig(raw []byte) (CLIPConfig, error) {
	c := DefaultCLIPConfig()
	var r rawCLIPConfig
	if err := json.Unmarshal(raw, &r); err != nil {
		return CLIPConfig{}, fmt.Errorf("preprocessor config: %w", err)
	}
	setBool(&c.DoResize, r.DoResize)
	setBool(&c.DoCenterCrop, r.DoCenterCrop)
	setBool(&c.DoRescale, r.DoRescale)
	setBool(&c.DoNormalize, r.DoNormalize)
	if r.Resample != nil {
		c.Resample = Filter(*r.Resample)
	}
	if r.RescaleFactor != nil {
		c.RescaleFactor = *r.RescaleFactor
	}
	if err := c.parseSizes(r.Size, r.CropSize); err != nil {
		return CLIPConfig{}, err
	}
	var err error
	if c.Mean, err = triple("image_mean", r.ImageMean, c.Mean); err != nil {
		return CLIPConfig{}, err
	}
	if c.Std, err = triple("image_std", r.ImageStd, c.Std); err != nil {
		return CLIPConfig{}, err
	}
	return c, c.Validate()
}

func setBool(dst *bool, v *bool) {
	if v != nil {
		*dst = *v
	}
}

// parseSizes reads size (a bare int means the shortest edge, as
// CLIPImageProcessor's get_size_dict(default_to_square=False) reads it)
// and crop_size (a bare int means a square).
func (c *CLIPConfig) parseSizes(size, crop json.RawMessage) error {
	if len(size) > 0 {
		var d sizeDict
		if n, ok := bareInt(size); ok {
			d.ShortestEdge = &n
		} else if err := json.Unmarshal(size, &d); err != nil {
			return fmt.Errorf("preprocessor config: size: %w", err)
		}
		switch {
		case d.ShortestEdge != nil:
			c.ShortestEdge, c.Height, c.Width = *d.ShortestEdge, 0, 0
		case d.Height != nil && d.Width != nil:
			c.ShortestEdge, c.Height, c.Width = 0, *d.Height, *d.Width
		default:
			return fmt.Errorf("preprocessor config: size %s: want {\"shortest_edge\": N} or {\"height\": H, \"width\": W}", size)
		}
	}
	if len(crop) > 0 {
		var d sizeDict
		if n, ok := bareInt(crop); ok {
			d.Height, d.Width = &n, &n
		} else if err := json.Unmarshal(crop, &d); err != nil {
			return fmt.Errorf("preprocessor config: crop_size: %w", err)
		}
		if d.Height == nil || d.Width == nil {
			return fmt.Errorf("preprocessor config: crop_size %s: want {\"height\": H, \"width\": W}", crop)
		}
		c.CropHeight, c.CropWidth = *d.Height, *d.Width
	}
	return nil
}

func bareInt(raw json.RawMessage) (int, bool) {
	var n int
	return n, json.Unmarshal(raw, &n) == nil
}

// triple reads a per-channel list of 3, or one number for all channels.
func triple(key string, raw json.RawMessage, def [3]float64) ([3]float64, error) {
	if len(raw) == 0 {
		return def, nil
	}
	var one float64
	if json.Unmarshal(raw, &one) == nil {
		return [3]float64{one, one, one}, nil
	}
	var list []float64
	if err := json.Unmarshal(raw, &list); err != nil || len(list) != 3 {
		return def, fmt.Errorf("preprocessor config: %s %s: want 3 numbers (one per RGB channel)", key, raw)
	}
	return [3]float64{list[0], list[1], list[2]}, nil
}

// Validate says what is wrong with a config.
func (c CLIPConfig) Validate() error {
	if c.DoResize {
		if _, err := kernelOf(c.Resample); err != nil {
			return fmt.Errorf("preprocessor config: %w", err)
		}
		if c.ShortestEdge == 0 && (c.Height <= 0 || c.Width <= 0) || c.ShortestEdge < 0 || c.ShortestEdge > maxSide || c.Height > maxSide || c.Width > maxSide {
			return fmt.Errorf("preprocessor config: resize size (shortest edge %d, %dx%d) must be positive and at most %d", c.ShortestEdge, c.Width, c.Height, maxSide)
		}
	}
	if c.DoCenterCrop && (c.CropHeight <= 0 || c.CropWidth <= 0 || c.CropHeight > maxSide || c.CropWidth > maxSide) {
		return fmt.Errorf("preprocessor config: crop_size %dx%d must be positive and at most %d", c.CropWidth, c.CropHeight, maxSide)
	}
	if c.DoRescale && (math.IsNaN(c.RescaleFactor) || math.IsInf(c.RescaleFactor, 0)) {
		return fmt.Errorf("preprocessor config: rescale_factor %g is not a finite number", c.RescaleFactor)
	}
	if c.DoNormalize {
		for i, s := range c.Std {
			if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) || math.IsNaN(c.Mean[i]) || math.IsInf(c.Mean[i], 0) {
				return fmt.Errorf("preprocessor config: image_mean %v / image_std %v: want finite numbers and a non-zero std", c.Mean, c.Std)
			}
		}
	}
	return nil
}

// ResizeTarget is the (width, height) the resize step produces for a
// width×height input: get_resize_output_image_size with
// default_to_square=False, whose long side is int(size·long/short) in
// float64, truncated.
func (c CLIPConfig) ResizeTarget(width, height int) (int, int) {
	if c.ShortestEdge == 0 {
		return c.Width, c.Height
	}
	short, long := height, width
	if width <= height {
		short, long = width, height
	}
	newLong := int(float64(c.ShortestEdge*long) / float64(short))
	if width <= height {
		return c.ShortestEdge, newLong
	}
	return newLong, c.ShortestEdge
}

// CLIPPreprocess is CLIPImageProcessor(images=img)["pixel_values"][0]:
// resize (Pillow, on 8-bit samples), center crop (on 8-bit samples),
// rescale (float64 product rounded to float32), normalise ((x - mean) /
// std in float32). The result is channels-first, [3, H, W], float32, where
// H×W is the crop size (or the resized size without a crop).
func CLIPPreprocess(img *RGB, c CLIPConfig) ([]float32, int, int, error) {
	if err := c.Validate(); err != nil {
		return nil, 0, 0, err
	}
	if err := checkSizes(img, 1, 1); err != nil {
		return nil, 0, 0, err
	}
	var err error
	if c.DoResize {
		w, h := c.ResizeTarget(img.Width, img.Height)
		if w <= 0 || h <= 0 {
			return nil, 0, 0, fmt.Errorf("imageproc: a %s image resizes to %dx%d: too thin for shortest edge %d", img, w, h, c.ShortestEdge)
		}
		if img, err = Resize(img, w, h, c.Resample); err != nil {
			return nil, 0, 0, err
		}
	}
	if c.DoCenterCrop {
		if img, err = CenterCrop(img, c.CropWidth, c.CropHeight); err != nil {
			return nil, 0, 0, err
		}
	}
	return c.toPixels(img), img.Height, img.Width, nil
}

// toPixels rescales and normalises img into channels-first float32.
func (c CLIPConfig) toPixels(img *RGB) []float32 {
	n := img.Width * img.Height
	out := make([]float32, 3*n)
	var mean, std [3]float32
	for ch := range 3 {
		mean[ch], std[ch] = float32(c.Mean[ch]), float32(c.Std[ch])
	}
	for i := range n {
		for ch := range 3 {
			v := float32(img.Pix[3*i+ch])
			if c.DoRescale {
				v = float32(float64(img.Pix[3*i+ch]) * c.RescaleFactor)
			}
			if c.DoNormalize {
				v = (v - mean[ch]) / std[ch]
			}
			out[ch*n+i] = v
		}
	}
	return out
}
