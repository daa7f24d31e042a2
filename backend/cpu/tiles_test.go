package cpu

import (
	"testing"

	"ferry/backend/backendtest"
	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// TestConformanceSmallTiles reruns the conformance suite with tiles small
// enough that the suite's modest shapes cross every tiling path: many
// attention tiles with ragged last ones in both directions, convolutions
// split into several position tiles and several K chunks.
func TestConformanceSmallTiles(t *testing.T) {
	saved := [...]int{attnTileQ, attnTileK, convScratchBytes, convTile, convMinTile}
	t.Cleanup(func() {
		attnTileQ, attnTileK, convScratchBytes, convTile, convMinTile = saved[0], saved[1], saved[2], saved[3], saved[4]
	})
	attnTileQ, attnTileK = 5, 24
	convScratchBytes, convTile, convMinTile = 4*1000, 40, 3
	backendtest.Run(t, func(c int64) tensor.Backend { return New(NewDevice(c), exactGEMM{}) })
}

// TestConformanceAttentionSplits runs the conformance suite on the packed
// attention path twice: every problem split by heads (each worker packs
// its own), then every problem split by query tiles (heads one at a time),
// whatever the core count.
func TestConformanceAttentionSplits(t *testing.T) {
	saved := attnHeadsPerWorker
	t.Cleanup(func() { attnHeadsPerWorker = saved })
	for _, split := range []struct {
		name      string
		perWorker int
	}{{"by heads", 0}, {"by query tiles", 1 << 30}} {
		t.Run(split.name, func(t *testing.T) {
			attnHeadsPerWorker = split.perWorker
			backendtest.Run(t, func(c int64) tensor.Backend { return New(NewDevice(c), gemm.DefaultGo()) })
		})
	}
}
