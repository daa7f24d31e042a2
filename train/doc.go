// Package train fine-tunes a diffusion transformer with the flow-matching
// objective: x_t = (1−σ)·x0 + σ·ε at timestep σ·1000, the model predicts
// the velocity ε − x0, and the loss is the mean squared error over every
// element.
//
// The pieces are small and separate so that each can be checked against a
// hand-derived value: the objective (noising, σ sampling, the loss and its
// gradient), the optimizer (AdamW exactly as torch.optim.AdamW, on host
// float32 slices), the EMA, global-norm clipping, and checkpoints that hold
// everything a run needs to continue bit-identically (weights, EMA,
// optimizer moments, the RNG state and the data position).
//
// Trainer ties them together over a Net (the model as the trainer sees it:
// host master weights, a forward pass that keeps what its backward needs,
// gradients) and a Data source. WanNet is the Net for the Wan transformer,
// trained in full or through LoRA adapters.
package train
