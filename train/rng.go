package train

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// RNG is the run's one random stream (σ, noise, LoRA initialisation),
// seeded by --seed. Its whole state is the PCG's, so a checkpoint that
// saves it continues the stream exactly.
type RNG struct {
	pcg *rand.PCG
	r   *rand.Rand
}

// NewRNG seeds a stream.
func NewRNG(seed uint64) *RNG {
	pcg := rand.NewPCG(seed, 0x7261696e) // "rain": any fixed second word
	return &RNG{pcg: pcg, r: rand.New(pcg)}
}

// Float64 is uniform in [0, 1).
func (g *RNG) Float64() float64 { return g.r.Float64() }

// Norm is standard normal.
func (g *RNG) Norm() float64 { return g.r.NormFloat64() }

// Normals returns n standard normal float32 values.
func (g *RNG) Normals(n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(g.r.NormFloat64())
	}
	return d
}

// Uniform fills d with values uniform in [−bound, bound).
func (g *RNG) Uniform(d []float32, bound float64) {
	for i := range d {
		d[i] = float32((2*g.r.Float64() - 1) * bound)
	}
}

// KaimingUniform fills a [rows, in] matrix as PEFT initialises lora_A
// (torch.nn.init.kaiming_uniform_ with a = √5): gain √(2/(1+a²)) = √(1/3),
// bound = √3·gain/√in = 1/√in.
func (g *RNG) KaimingUniform(d []float32, in int) {
	g.Uniform(d, 1/math.Sqrt(float64(in)))
}

// MarshalBinary saves the stream's state.
func (g *RNG) MarshalBinary() ([]byte, error) { return g.pcg.MarshalBinary() }

// UnmarshalBinary restores a state saved by MarshalBinary.
func (g *RNG) UnmarshalBinary(b []byte) error {
	if err := g.pcg.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("rng state: %w", err)
	}
	return nil
}
