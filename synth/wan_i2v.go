package synth

import (
	"ferry/catalog"
	"ferry/dtype"
)

// addImageToVideo makes a the folder of a TI2V or image-to-video
// architecture: expand_timesteps in model_index.json (TI2V-5B, whose
// transformer follows Arch.DType), and for Wan 2.1 I2V the
// WanImageToVideoPipeline class with its CLIP image encoder and the
// CLIPImageProcessor config (Wan 2.2 I2V: the class without them).
func addImageToVideo(a *Arch, c catalog.Wan) {
	if c.ExpandTimesteps {
		if a.Settings == nil {
			a.Settings = map[string]any{}
		}
		a.Settings["expand_timesteps"] = true
		a.Settings["boundary_ratio"] = nil
		a.Components[1].DType = c.Storage // the text encoder, as published
		a.DType = c.TransformerDType()
	}
	if c.ImageEncoder == nil && !c.ImageToVideo {
		return
	}
	a.Class = "WanImageToVideoPipeline"
	if c.ImageEncoder == nil {
		// Wan 2.2 I2V: model_index.json declares no image encoder.
		if a.Settings == nil {
			a.Settings = map[string]any{}
		}
		a.Settings["image_encoder"] = []any{nil, nil}
		a.Settings["image_processor"] = []any{nil, nil}
		return
	}
	enc := *c.ImageEncoder
	cfg := map[string]any{"architectures": []string{"CLIPVisionModel"}, "model_type": "clip_vision_model",
		"hidden_size": enc.HiddenSize, "intermediate_size": enc.IntermediateSize, "num_hidden_layers": enc.NumHiddenLayers,
		"num_attention_heads": enc.NumAttentionHeads, "num_channels": enc.NumChannels, "image_size": enc.ImageSize,
		"patch_size": enc.PatchSize, "hidden_act": enc.HiddenAct, "layer_norm_eps": enc.LayerNormEps,
		"projection_dim": 1024, "torch_dtype": "float32"}
	proc := map[string]any{"crop_size": map[string]int{"height": enc.ImageSize, "width": enc.ImageSize},
		"do_center_crop": true, "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
		"image_mean": []float64{0.48145466, 0.4578275, 0.40821073}, "image_processor_type": "CLIPImageProcessor",
		"image_std": []float64{0.26862954, 0.26130258, 0.27577711}, "resample": 3, "rescale_factor": 1.0 / 255,
		"size": map[string]int{"shortest_edge": enc.ImageSize}}
	// The Wan 2.1 I2V folders publish the image encoder in float32.
	a.Components = append(a.Components,
		Component{Name: "image_encoder", Library: "transformers", Class: "CLIPVisionModel", Config: cfg,
			Params: enc.Params(), WeightsName: "model", DType: dtype.F32},
		Component{Name: "image_processor", Library: "transformers", Class: "CLIPImageProcessor", Config: proc,
			ConfigFile: "preprocessor_config.json"})
}
