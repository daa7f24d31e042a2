// Package planner plans a memory residency schedule before anything runs.
//
// A model Profile (built from configs alone: parameter lists per block,
// plus per-architecture formulas for FLOPs and activations) and a hardware
// profile (package hwprofile) let Predict estimate, for a residency.Plan and
// a Request, the peak device, host and RSS bytes and the time per phase.
// Predict simulates what the residency executor and the CPU device's
// caching allocator do — which blocks are queued, loaded, evicted and
// reclaimed, every activation allocated and freed in the order the model
// code allocates it — on a clock driven by the hardware figures, so the
// predicted peaks follow the code rather than a rule of thumb.
//
// Search enumerates placements (resident, onload, stream with prefetch k
// and persistent n, host), tiers, FFN chunking, CFG batching and VAE tiling
// and returns the fastest plan whose predicted peaks fit the budgets; the
// presets other tools expose (level0..3, FastVideo's flags, diffusers'
// offload modes, DiffSynth's vram-limit) are named plans over the same
// schedule, and are candidates of the search too, so that "auto" is never
// predicted slower than a preset that fits.
package planner

// The pipeline contract
//
// Predictions follow model code allocation by allocation (model/wan,
// model/umt5 and model/wanvae are mirrored in wanscript.go, umt5script.go
// and vaescript.go; the tests run the real models through the real
// executor and require the same peaks). What the pipeline itself does is
// assumed to be this (pipelineSim in predict.go), and pipeline/wan must do
// the same for the predicted peaks to hold:
//
//   - text: Encode the prompt, then (guidance > 1) the negative prompt,
//     each with batch Request.Batch and Request.TextLen tokens, on
//     Executor.Ops("text_encoder"); keep both outputs; Done("text_encoder").
//     When the text encoder is placed on the host, copy each output to the
//     device (upload, then free the host copy). With batched CFG join the
//     two into one [2B, L, D] tensor on the device and free them.
//   - LoRA (Request.AdapterBytes > 0): after the contexts, upload every
//     adapter into one float32 buffer of that size on the transformer's
//     device; free it with the contexts. Inside the pass each adapted
//     Linear (Request.LoRA) makes its adapters' intermediates (wanscript).
//   - denoise: per step and per branch pass, upload the latents
//     [b, C, F, H, W] on the device, Forward, download and free the
//     prediction, free the latents (the sampler works in Go memory). After
//     the last step Done("transformer"), then free the contexts.
//   - two experts (Wan 2.2 A14B, Profile.TwoExperts): the steps before
//     Profile.SwitchStep run "transformer", the rest "transformer_2",
//     each with the contexts (and adapters) uploaded on its own Ops when
//     its first step starts. Before the last pass of the last
//     high-noise step, Executor.Handoff("transformer", "transformer_2");
//     after that step Executor.Retire("transformer"), then free its
//     contexts. After the last step Done on the transformer that ran it,
//     then free its contexts.
//   - decode: upload the latents on Executor.Ops("vae"), Decode (tiled
//     when Run.VAETile is set: wanvae.SquareTiling(VAETile, VAEStride)),
//     free the latents, Done("vae"), download and free the video.
