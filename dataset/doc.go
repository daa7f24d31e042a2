// Package dataset is the training set as the trainer reads it: a latent
// cache that `ferry cache` writes once, so that training never holds the
// text encoder or the VAE (musubi-tuner's cache_latents and
// cache_text_encoder_outputs, in one pass).
//
// A data folder holds NAME.{mp4,avi,gif,png,jpg,jpeg} clips, each with its
// caption in NAME.txt (Scan). Each sample becomes one safetensors file,
//
//	CACHE/<bucket>/<name>.safetensors
//	  latents  float32 [z_dim, T, H/8, W/8]  the VAE posterior's mean,
//	                                         (mean − latents_mean) / latents_std
//	  text     float32 [L, text_dim]         UMT5 embeddings of the caption's
//	                                         L real tokens (</s> included)
//	  metadata source file, its size and modification time, caption,
//	           size and frames, the encoding settings, the model fingerprint
//
// and CACHE/index.json lists the samples, the buckets (samples of one
// latent shape, so that a batch stacks), and the model the cache was made
// with. The trainer pads text with zeros to the pipeline's sequence length
// (512) as WanPipeline pads its prompt embeddings.
//
// Every file is written to a temporary name and renamed, so a reader sees
// whole files only, and a rerun that stops half way keeps every sample it
// finished. Open validates index.json; Load validates each sample file
// against it. Errors name the file.
package dataset
