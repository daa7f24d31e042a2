package clipvision

import (
	"strings"

	"ferry/checkpoint"
)

// The Wan repositories ship Wan 2.1 I2V's image encoder as
// models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth: the whole
// XLM-RoBERTa CLIP of their wan/modules/clip.py, whose vision tower is
// the ViT-H/14 transformers holds as CLIPVisionModel. An image_encoder
// folder holding that file opens with the tower's names mapped to
// transformers' (its fused to_qkv projection read as q, k and v: row
// ranges of the same bytes; the [1, 1, d] class and [1, n, d] position
// embeddings read as [d] and [n, d]); the text tower, the logit scale and
// the projection head, which the I2V pipelines never run, are left out.
func init() {
	n := checkpoint.Naming{Detect: originalLayout, Rename: transformersName, Views: originalViews}
	checkpoint.RegisterNaming("CLIPVisionModel", n)
	checkpoint.RegisterNaming("CLIPVisionModelWithProjection", n)
}

const wanVisual = "visual."

// originalLayout says names are wan/modules/clip.py's.
func originalLayout(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, wanVisual+"transformer.") || n == wanVisual+"patch_embedding.weight" {
			return true
		}
	}
	return false
}

// layerParts maps the tail of a layer's name, after "visual.transformer.N.".
var layerParts = map[string]string{
	"norm1.weight": "layer_norm1.weight", "norm1.bias": "layer_norm1.bias",
	"attn.proj.weight": "self_attn.out_proj.weight", "attn.proj.bias": "self_attn.out_proj.bias",
	"norm2.weight": "layer_norm2.weight", "norm2.bias": "layer_norm2.bias",
	"mlp.0.weight": "mlp.fc1.weight", "mlp.0.bias": "mlp.fc1.bias",
	"mlp.2.weight": "mlp.fc2.weight", "mlp.2.bias": "mlp.fc2.bias",
}

// topParts maps the vision tower's other names, after "visual.".
var topParts = map[string]string{
	"patch_embedding.weight": embedPrefix + "patch_embedding.weight",
	"pre_norm.weight":        root + "pre_layrnorm.weight",
	"pre_norm.bias":          root + "pre_layrnorm.bias",
	"post_norm.weight":       root + "post_layernorm.weight",
	"post_norm.bias":         root + "post_layernorm.bias",
}

// transformersName maps one name; the text tower, log_scale and the
// vision head are not kept. Names it does not know stay as they are (the
// checkpoint check then names them).
func transformersName(n string) (string, bool) {
	rest, ok := strings.CutPrefix(n, wanVisual)
	switch {
	case !ok:
		return n, !strings.HasPrefix(n, "textual.") && n != "log_scale"
	case rest == "head":
		return n, false
	}
	if to, ok := topParts[rest]; ok {
		return to, true
	}
	if idx, tail, ok := layerName(rest); ok {
		if to, known := layerParts[tail]; known {
			return layersRoot + idx + "." + to, true
		}
	}
	return n, true
}

// layerName splits "transformer.N.tail".
func layerName(rest string) (idx, tail string, ok bool) {
	rest, ok = strings.CutPrefix(rest, "transformer.")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ".")
}

// originalViews reads the fused projections and the batched embeddings.
func originalViews(n string, shape []int) []checkpoint.View {
	rest, ok := strings.CutPrefix(n, wanVisual)
	if !ok || len(shape) == 0 {
		return nil
	}
	switch rest {
	case "cls_embedding": // [1, 1, d]
		return []checkpoint.View{{Name: embedPrefix + "class_embedding", Rows: 1, Shape: shape[len(shape)-1:]}}
	case "pos_embedding": // [1, n, d]
		return []checkpoint.View{{Name: embedPrefix + "position_embedding.weight", Rows: 1, Shape: shape[len(shape)-2:]}}
	}
	idx, tail, ok := layerName(rest)
	if !ok || (tail != "attn.to_qkv.weight" && tail != "attn.to_qkv.bias") {
		return nil
	}
	// Output features are ordered (q|k|v, head, head_dim): thirds.
	d := shape[0] / 3
	kind := tail[len("attn.to_qkv."):]
	var views []checkpoint.View
	for i, proj := range []string{"q_proj", "k_proj", "v_proj"} {
		views = append(views, checkpoint.View{Name: layersRoot + idx + ".self_attn." + proj + "." + kind,
			Row0: i * d, Rows: d, Shape: append([]int{d}, shape[1:]...)})
	}
	return views
}
