package planner

// deref is *p, or 0 for nil (a config key that is null or absent).
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
