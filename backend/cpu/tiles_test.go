package cpu

import (
	"testing"

	"ferry/backend/backendtest"
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
