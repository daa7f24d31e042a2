package train

import (
	"errors"
	"fmt"
	"slices"

	"ferry/dataset"
)

// CacheData yields micro-batches from a latent cache: each epoch's
// batches in the order dataset.Cache.Batches gives for the run's seed,
// epoch after epoch. The text of every sample is padded with zero rows to
// the pipeline's sequence length, as WanPipeline pads prompt embeddings.
type CacheData struct {
	cache  *dataset.Cache
	seed   uint64
	batch  int
	pad    int
	pos    Position
	order  [][]int // the batches of epoch orderOf
	orderE int
}

// TextLen is the sequence length WanPipeline pads prompt embeddings to
// (max_sequence_length 512).
const TextLen = 512

// NewCacheData reads c in batches of batch samples, text padded to pad
// rows (TextLen for Wan); seed fixes the order.
func NewCacheData(c *dataset.Cache, seed uint64, batch, pad int) (*CacheData, error) {
	if c.Len() == 0 {
		return nil, errors.New("the latent cache holds no samples")
	}
	if batch < 1 {
		return nil, fmt.Errorf("batch size must be >= 1, got %d", batch)
	}
	if pad <= 0 {
		return nil, fmt.Errorf("text length must be > 0, got %d", pad)
	}
	return &CacheData{cache: c, seed: seed, batch: batch, pad: pad, orderE: -1}, nil
}

// batches is the order of epoch e.
func (d *CacheData) batches(e int) [][]int {
	if d.orderE != e {
		d.order, d.orderE = d.cache.Batches(d.seed, e, d.batch), e
	}
	return d.order
}

// Next loads and stacks the next batch.
func (d *CacheData) Next() (*Batch, error) {
	order := d.batches(d.pos.Epoch)
	idx := order[d.pos.Index]
	b, err := d.load(idx)
	if err != nil {
		return nil, err
	}
	d.pos.Index++
	if d.pos.Index == len(order) {
		d.pos = Position{Epoch: d.pos.Epoch + 1}
	}
	return b, nil
}

// load reads samples idx (one bucket, so one latent shape) into a batch.
func (d *CacheData) load(idx []int) (*Batch, error) {
	b := &Batch{}
	for _, i := range idx {
		s, err := d.cache.Load(i)
		if err != nil {
			return nil, err
		}
		if b.LatentShape == nil {
			b.LatentShape = append([]int{len(idx)}, s.LatentShape...)
			b.ContextShape = []int{len(idx), d.pad, s.TextShape[1]}
		} else if !slices.Equal(b.LatentShape[1:], s.LatentShape) {
			return nil, fmt.Errorf("cache sample %q is %v, its batch %v: the cache's buckets are inconsistent", s.Name, s.LatentShape, b.LatentShape[1:])
		}
		if len(s.TextShape) != 2 || s.TextShape[0] > d.pad || s.TextShape[1] != b.ContextShape[2] {
			return nil, fmt.Errorf("cache sample %q: text %v does not fit [<=%d, %d]", s.Name, s.TextShape, d.pad, b.ContextShape[2])
		}
		b.Latents = append(b.Latents, s.Latents...)
		text := make([]float32, d.pad*s.TextShape[1])
		copy(text, s.Text)
		b.Context = append(b.Context, text...)
	}
	return b, nil
}

// Position is where the next batch comes from.
func (d *CacheData) Position() Position { return d.pos }

// Seek moves to p (a position Position returned).
func (d *CacheData) Seek(p Position) error {
	if p.Epoch < 0 || p.Index < 0 || p.Index >= len(d.batches(p.Epoch)) {
		return fmt.Errorf("data position epoch %d batch %d is not in this cache (%d batches an epoch)", p.Epoch, p.Index, len(d.batches(max(p.Epoch, 0))))
	}
	d.pos = p
	return nil
}
