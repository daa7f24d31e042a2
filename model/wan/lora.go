package wan

import (
	"fmt"
	"sort"
	"strings"

	"ferry/tensor"
)

// LoRA is one low-rank adapter on a Linear of the transformer, applied
// unmerged: y = W·x + b + Scale·B(A·x). The base weight stays as stored (so
// it streams like any other), and several adapters may sit on one Linear.
type LoRA struct {
	// Module is the Linear's state-dict name, e.g. "blocks.0.attn1.to_q".
	Module string
	// A is [rank, in] and B is [out, rank], float32 on the compute device;
	// the caller owns them.
	A, B *tensor.Tensor
	// Scale is alpha/rank times the user's multiplier.
	Scale float32
	// Bias, when set, is added to the output as it is ([1, out], the
	// file's bias already times the user's multiplier). A and B may then be
	// nil: a bias alone.
	Bias *tensor.Tensor
	// GradA and GradB, when set, receive the adapter's gradients in a
	// training backward pass (accumulated, like every weight gradient).
	GradA, GradB *tensor.Tensor
}

// linearModules maps every Linear a LoRA may adapt to its weights struct,
// by state-dict module name. The patch embedding is a Conv3d and takes
// none.
func (m *Model) linearModules() map[string]*linear {
	mods := map[string]*linear{
		"condition_embedder.time_embedder.linear_1": &m.embed.Time1,
		"condition_embedder.time_embedder.linear_2": &m.embed.Time2,
		"condition_embedder.time_proj":              &m.embed.TimeProj,
		"condition_embedder.text_embedder.linear_1": &m.embed.Text1,
		"condition_embedder.text_embedder.linear_2": &m.embed.Text2,
		"proj_out": &m.out.Proj,
	}
	for i := range m.layers {
		c, p := &m.layers[i].Core, layerPrefix(i)
		for name, a := range map[string]*attention{"attn1.": &c.Attn1, "attn2.": &c.Attn2} {
			mods[p+name+"to_q"] = &a.Q
			mods[p+name+"to_k"] = &a.K
			mods[p+name+"to_v"] = &a.V
			mods[p+name+"to_out.0"] = &a.Out
		}
		mods[p+"ffn.net.0.proj"] = &c.FF1
		mods[p+"ffn.net.2"] = &c.FF2
		if m.cfg.HasImage() {
			img := &m.layers[i].Image
			mods[p+"attn2.add_k_proj"] = &img.K
			mods[p+"attn2.add_v_proj"] = &img.V
		}
	}
	if m.cfg.HasImage() {
		mods["condition_embedder.image_embedder.ff.net.0.proj"] = &m.embed.Image.FF1
		mods["condition_embedder.image_embedder.ff.net.2"] = &m.embed.Image.FF2
	}
	return mods
}

// LinearShapes lists the Linears a LoRA may adapt with their [out, in]
// sizes, by module name, sorted by name.
func (c Config) LinearShapes() (names []string, shapes map[string][2]int) {
	shapes = map[string][2]int{}
	for _, p := range c.Params() {
		mod, ok := strings.CutSuffix(p.Name, ".weight")
		if len(p.Shape) != 2 || !ok {
			continue
		}
		shapes[mod] = [2]int{p.Shape[0], p.Shape[1]}
		names = append(names, mod)
	}
	sort.Strings(names)
	return names, shapes
}

// SetLoRA replaces the adapters applied by Forward (and by training
// passes) with ls; nil removes them all. Every adapter must name a Linear
// of this model and match its sizes.
func (m *Model) SetLoRA(ls []LoRA) error {
	mods := m.linearModules()
	_, shapes := m.cfg.LinearShapes()
	for _, l := range ls {
		if _, ok := mods[l.Module]; !ok {
			return fmt.Errorf("wan: LoRA for %q: the transformer has no such Linear", l.Module)
		}
		if err := l.fits(shapes[l.Module]); err != nil {
			return err
		}
	}
	for _, l := range mods {
		l.lora = nil
	}
	for _, l := range ls {
		mods[l.Module].lora = append(mods[l.Module].lora, l)
	}
	return nil
}

// fits checks an adapter against its Linear's [out, in]: a pair of A
// [rank, in] and B [out, rank], a bias [1, out], or both.
func (l LoRA) fits(s [2]int) error {
	pair := l.A != nil || l.B != nil
	if pair && (l.A == nil || l.B == nil || l.A.Rank() != 2 || l.B.Rank() != 2 || l.A.Dim(0) != l.B.Dim(1) ||
		l.A.Dim(1) != s[1] || l.B.Dim(0) != s[0]) {
		return fmt.Errorf("wan: LoRA for %q: A %v and B %v do not fit the Linear [%d, %d] (want A [rank, %d], B [%d, rank])",
			l.Module, l.A, l.B, s[0], s[1], s[1], s[0])
	}
	if l.Bias != nil && (l.Bias.Len() != s[0] || l.Bias.Dim(-1) != s[0]) {
		return fmt.Errorf("wan: LoRA for %q: bias %v does not fit the Linear's %d outputs", l.Module, l.Bias, s[0])
	}
	if !pair && l.Bias == nil {
		return fmt.Errorf("wan: LoRA for %q holds neither a pair nor a bias", l.Module)
	}
	return nil
}

// project is a Linear with its adapters: x·Wᵀ + b + Σ (Scale·(x·Aᵀ)·Bᵀ + Bias).
// Each adapter's product is added a block of rows at a time (see byRows),
// so that it never needs a second output-sized tensor: what an adapter
// adds to the device peak is its rank-wide x·Aᵀ and a few MB.
func project(ops *tensor.Ops, x *tensor.Tensor, l linear) *tensor.Tensor {
	y, lows := projectTrain(ops, x, l)
	tensor.Free(lows...)
	return y
}
