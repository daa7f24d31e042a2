package residency

import (
	"testing"
)

// FuzzParsePlan: any input either fails with an error or yields a plan that
// validates and survives a YAML round trip unchanged.
func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{
		`{"components":{"transformer":{"placement":"stream","prefetch":1}}}`,
		"name: x\ncomponents:\n  vae: {placement: onload, tier: disk}\nrun: {cfg: sequential, vae_tile: 256}\n",
		"components: {t: {placement: stream, persistent: 3, blocks: {t.blocks.0: resident}}}",
		"components: {t: {placement: teleport}}",
		"{", "- 1", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePlan(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("parsed plan does not validate: %v", err)
		}
		out, err := p.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		q, err := ParsePlan(out)
		if err != nil {
			t.Fatalf("round trip of %q: %v", out, err)
		}
		again, _ := q.YAML()
		if string(again) != string(out) {
			t.Fatalf("round trip changed the plan:\n%s\n%s", out, again)
		}
	})
}
