// Package lora reads and writes the LoRA files people already train and
// share for Wan 2.1 transformers, so that ferry can apply them at
// generation and save what it trains in a form the other tools load.
//
// Read accepts one safetensors file in any of the namings in use:
//
//   - diffusers / PEFT: "<module>.lora_A.weight" [rank, in] and
//     "<module>.lora_B.weight" [out, rank], with module names of diffusers'
//     WanTransformer3DModel ("blocks.0.attn1.to_q"), bare (a PEFT model's
//     save_pretrained, ferry's trainer goldens) or behind "transformer."
//     (diffusers' save_lora_weights) or "base_model.model."; an adapter
//     name between lora_A and weight (".lora_A.default.weight") is allowed;
//   - the original Wan module names ("blocks.0.self_attn.q",
//     "blocks.0.ffn.0", "head.head", "text_embedding.0", ...), behind
//     "diffusion_model." as ComfyUI and musubi-tuner's "other" format write
//     them, with lora_A/lora_B or lora_down/lora_up and ".alpha";
//   - kohya's naming, musubi-tuner's default: "lora_unet_blocks_0_self_attn_q"
//     with ".lora_down.weight", ".lora_up.weight" and ".alpha".
//
// Biases and differences are read as diffusers' loader takes them
// (_convert_non_diffusers_wan_lora_to_diffusers, the files Kijai's and
// lightx2v's distillation LoRAs are): a module's "diff_b" is a bias added as
// it is, PEFT's "lora_B.bias" one scaled by alpha/rank as the product is,
// and a diff_b without a pair a bias alone; a time_projection diff_b
// without the module's pair is dropped, as are every norm layer's "diff"
// and "diff_b", the differences of modules that are no Linear (the patch
// embedding's), and the full weight differences ("diff") of Linears other
// than the head, whose difference is a pair with an identity lora_B.
//
// Every name is mapped to the diffusers module name the Wan model uses
// (model/wan's LoRA.Module). Weights may be stored as F32, BF16, F16 or F64
// and are returned as float32.
//
// The scale an adapter is applied with is Alpha/Rank. Alpha comes from the
// module's ".alpha" tensor when the file has one (kohya, ComfyUI), else from
// diffusers' "lora_adapter_metadata" (the PEFT LoraConfig that
// save_lora_weights stores as JSON in the safetensors metadata: lora_alpha,
// alpha_pattern, use_rslora), else it is Rank (scale 1), which is what
// diffusers assumes for a file without either.
//
// Write writes diffusers' naming with the "transformer." prefix in float32,
// with the lora_adapter_metadata diffusers reads back (r, lora_alpha,
// target_modules, and rank_pattern / alpha_pattern where adapters differ),
// so that WanPipeline.load_lora_weights restores the same scales.
package lora
