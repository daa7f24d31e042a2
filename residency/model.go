package residency

// Runner is what model code needs from the executor: run fn with block b's
// weights bound. Tests may pass any Runner; pipelines pass the Executor.
type Runner interface {
	Run(b *Block, fn func() error) error
}

// ParamSpec is one weight a model architecture expects, derived from its
// config alone: the block it belongs to, its checkpoint name and shape. Model
// packages list them so that checkpoints can be synthesised, inspected for
// completeness and profiled without reading weights.
type ParamSpec struct {
	Block string // block name, e.g. "blocks.3" (the Block.Name suffix after the component)
	Name  string // checkpoint tensor name, e.g. "blocks.3.attn1.to_q.weight"
	Shape []int
	// Rows marks a table read by row on demand (an embedding), never moved whole.
	Rows bool
}
