package train

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeState: state.json from disk never panics the decoder, and
// whatever it accepts is consistent (non-negative counters, a history per
// step, an RNG state).
func FuzzDecodeState(f *testing.F) {
	good, _ := json.Marshal(state{Version: stateVersion, Step: 1, RNG: []byte{1, 2}, History: []StepStat{{Step: 1, Loss: 0.5}},
		Params: []paramInfo{{Name: "w", Shape: []int{2, 3}}}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"step":-1}`))
	f.Add([]byte(`{"version":1,"step":0,"rng":"AQ==","params":[{"name":"x","shape":[-4]}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		st, err := decodeState(raw)
		if err != nil {
			return
		}
		if st.Step < 0 || len(st.History) != st.Step || len(st.RNG) == 0 || st.Position.Index < 0 {
			t.Fatalf("accepted inconsistent state %+v", st)
		}
	})
}
