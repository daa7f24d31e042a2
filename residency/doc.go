// Package residency owns where weights live. A Plan says, for every component
// of a pipeline (and optionally single blocks), whether its weights stay on
// the device, move in whole when used (onload), stream block by block with a
// prefetch depth, or stay on the host; and whether the copy kept between uses
// lives in host RAM or is read again from disk.
//
// The Executor carries a plan out. Model code declares its blocks (weights
// structs with `w` tags, see bind.go) and calls Run(block, fn): the executor
// makes sure the block's weights are on the device (prefetched by the copy
// worker, or loaded now), binds them into the struct, runs fn, releases what
// the plan says to release and starts copying what comes next. Model code
// never moves weights and never sees the plan.
//
// A component may say the cyclic order its blocks run in (Component.Order;
// a training step runs them forward then backward, TrainingOrder) and
// prefetching follows it; Handoff carries one component's prefetch into
// the next (Wan 2.2's expert switch). Fixed binds weights the caller
// already holds (full fine-tuning's master weights, tests), and
// HostActivations keeps a training step's activations on the host tier
// between a block's forward and its backward.
//
// Invariants (after vLLM-Omni's offloader): residency is explicit (a block is
// absent, loading or loaded, nothing in between); use follows readiness (fn
// never runs before its weights are complete); memory is bounded (every byte
// comes from a budgeted Device) and released (Close returns the devices to
// zero allocated).
package residency
