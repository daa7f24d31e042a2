package train

import (
	"math"
	"testing"
)

// adamRef is AdamW written out in float64 from the paper's update with
// torch's decoupled decay, for comparison.
func adamRef(c AdamConfig, p float64, grads []float64) []float64 {
	var m, v float64
	var out []float64
	for t, g := range grads {
		k := float64(t + 1)
		p *= 1 - c.LR*c.WeightDecay
		m = c.Beta1*m + (1-c.Beta1)*g
		v = c.Beta2*v + (1-c.Beta2)*g*g
		denom := math.Sqrt(v)/math.Sqrt(1-math.Pow(c.Beta2, k)) + c.Eps
		p -= c.LR / (1 - math.Pow(c.Beta1, k)) * m / denom
		out = append(out, p)
	}
	return out
}

func TestAdamW(t *testing.T) {
	tests := []struct {
		name  string
		cfg   AdamConfig
		p0    float64
		grads []float64
		// first is the value after step 1 derived by hand.
		first float64
	}{
		// Step 1: p·(1−0.1·0.01) = 0.999; m̂ = g, v̂ = g², so the step is
		// lr·sign(g) = 0.1: 0.899.
		{"decay", AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}, 1, []float64{0.5, -0.25, 0.125, 2}, 0.899},
		// No decay, negative gradient: 1 + 0.01.
		{"no decay", AdamConfig{LR: 0.01, Beta1: 0.8, Beta2: 0.99, Eps: 1e-8}, 1, []float64{-3, 1, 1, -0.5}, 1.01},
		// β1 < 0.5 takes torch.lerp's other formula; eps dominates a
		// tiny gradient: 1e-9/(1e-9+1e-3)·lr.
		{"small beta1", AdamConfig{LR: 0.5, Beta1: 0.3, Beta2: 0.9, Eps: 1e-3}, -2, []float64{1e-9, 4, -4}, -2 - 0.5*1e-9/(1e-9+1e-3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewParam("p", 1)
			p.Data[0] = float32(tt.p0)
			o := NewAdamW(tt.cfg, []*Param{p})
			want := adamRef(tt.cfg, tt.p0, tt.grads)
			for k, g := range tt.grads {
				if err := o.Step([]*Param{p}, [][]float32{{float32(g)}}); err != nil {
					t.Fatal(err)
				}
				if k == 0 && math.Abs(float64(p.Data[0])-tt.first) > 1e-6 {
					t.Errorf("step 1: %.9g, want %.9g", p.Data[0], tt.first)
				}
				if d := math.Abs(float64(p.Data[0]) - want[k]); d > 2e-6*math.Max(1, math.Abs(want[k])) {
					t.Errorf("step %d: %.9g, want %.9g", k+1, p.Data[0], want[k])
				}
			}
			if o.Steps != int64(len(tt.grads)) {
				t.Errorf("Steps = %d", o.Steps)
			}
		})
	}
}

func TestAdamWRejectsMismatch(t *testing.T) {
	p := NewParam("p", 2)
	o := NewAdamW(DefaultAdam(1e-3), []*Param{p})
	if err := o.Step([]*Param{p}, [][]float32{{1}}); err == nil {
		t.Error("short gradient accepted")
	}
	if err := (AdamConfig{LR: 1, Beta1: 1, Beta2: 0.5}).Check(); err == nil {
		t.Error("beta1 = 1 accepted")
	}
}

func TestEMA(t *testing.T) {
	p := NewParam("p", 2)
	p.Data[0], p.Data[1] = 1, -4
	e := NewEMA(0.9, []*Param{p})
	// ema_0 = w_0; then 0.9·ema + 0.1·w after each update.
	steps := [][2]float32{{2, 0}, {3, 6}}
	want := [][2]float64{{0.9 + 0.2, -3.6}, {0.99 + 0.3, -3.24 + 0.6}}
	for k, w := range steps {
		p.Data[0], p.Data[1] = w[0], w[1]
		if err := e.Update([]*Param{p}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if d := math.Abs(float64(e.W[0][i]) - want[k][i]); d > 1e-6 {
				t.Errorf("update %d [%d]: %g, want %g", k+1, i, e.W[0][i], want[k][i])
			}
		}
	}
	// The average is a copy: changing the weights later leaves it alone.
	p.Data[0] = 100
	if e.W[0][0] == 100 {
		t.Error("EMA aliases the parameters")
	}
}

func TestClipGradNorm(t *testing.T) {
	tests := []struct {
		name    string
		max     float64
		want    []float32
		wantNrm float64
	}{
		{"off", 0, []float32{3, 4, 0}, 5},
		{"above", 1, []float32{0.6, 0.8, 0}, 5},
		{"below", 10, []float32{3, 4, 0}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := [][]float32{{3}, {4, 0}}
			norm := ClipGradNorm(g, tt.max)
			if norm != tt.wantNrm {
				t.Errorf("norm %g, want %g", norm, tt.wantNrm)
			}
			got := []float32{g[0][0], g[1][0], g[1][1]}
			for i := range got {
				if math.Abs(float64(got[i]-tt.want[i])) > 1e-6 {
					t.Errorf("[%d] = %g, want %g", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestAverageGrads(t *testing.T) {
	g := [][]float32{{3, -6}, {1.5}}
	AverageGrads(g, 3)
	if g[0][0] != 1 || g[0][1] != -2 || g[1][0] != 0.5 {
		t.Errorf("got %v", g)
	}
}
