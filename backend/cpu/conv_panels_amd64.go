package cpu

// installConv installs k's panel gather (asmKernels.install).
func (k *asmKernels) installConv() {
	gatherPanel = func(dst, x []float32, tab []tapRun, runs, plane, r0, steps, kvol, rows int) {
		if steps == 0 || rows == 0 {
			return
		}
		_ = dst[steps*rows-1]
		_ = tab[kvol*runs-1]
		k.gatherPanel(&dst[0], &x[0], &tab[0], runs, plane, r0/kvol, r0%kvol, steps, kvol, rows)
	}
}

// gatherPanelAVX512 is gatherPanelGo with one masked load per run and one
// masked store per step. Its loads trust tab: every lane of every mask
// must be inside its channel (panelTaps builds the masks from the input's
// bounds, and tileTaps.describe checks them).
//
//go:noescape
func gatherPanelAVX512(dst, x *float32, tab *tapRun, runs, plane, ch, tap, steps, kvol, rows int)
