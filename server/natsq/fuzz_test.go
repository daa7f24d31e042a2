package natsq

import (
	"encoding/json"
	"testing"

	"ferry/server/queue"
)

// FuzzParseJobMsg: any bytes on the job subject either parse to a job id
// that is a single subject token and bucket key, or are refused; what
// Submit writes always parses back.
func FuzzParseJobMsg(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"id":"video_1","need":{"model":"wan-tiny","device_bytes":5}}`,
		`{"id":"a.b"}`, `{"id":"x","need":{"device_bytes":-1}}`, `{"id":"*"}`, `[1,2]`, `{"id":"` + string(make([]byte, 300)) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := parseJobMsg(data)
		if !ok {
			return
		}
		if !validToken(p.ID) || p.Need.DeviceBytes < 0 || p.Need.HostBytes < 0 {
			t.Fatalf("accepted %q as %+v", data, p)
		}
		b, err := json.Marshal(jobMsg{ID: p.ID, Need: queue.Need{Model: p.Need.Model, DeviceBytes: p.Need.DeviceBytes}})
		if err != nil {
			t.Fatal(err)
		}
		if q, ok := parseJobMsg(b); !ok || q.ID != p.ID {
			t.Fatalf("round trip of %+v: %+v %v", p, q, ok)
		}
	})
}
