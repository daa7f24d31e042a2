package gemm

import "testing"

func TestChooseCoreType(t *testing.T) {
	tests := []struct {
		name     string
		override string
		f        cpuFeatures
		want     string
	}{
		{"override wins on AVX-512", "Haswell", cpuFeatures{avx512: true, bf16: true}, "Haswell"},
		{"override wins without AVX-512", "Zen", cpuFeatures{}, "Zen"},
		{"AVX-512", "", cpuFeatures{avx512: true}, "SkylakeX"},
		{"AVX-512 with BF16 still SkylakeX", "", cpuFeatures{avx512: true, bf16: true}, "SkylakeX"},
		{"no AVX-512 leaves the environment", "", cpuFeatures{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := chooseCoreType(tt.override, tt.f)
			if got != tt.want || reason == "" {
				t.Errorf("chooseCoreType(%q, %+v) = %q (%q), want %q with a reason", tt.override, tt.f, got, reason, tt.want)
			}
		})
	}
}
