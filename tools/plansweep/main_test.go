package main

import (
	"encoding/json"
	"testing"
)

// TestDescribe checks a plan's label: the model's own components only, in
// pipeline order whatever the map's order, then the run options.
func TestDescribe(t *testing.T) {
	tests := []struct {
		name, report, want string
	}{
		{"a preset on a text-to-video model",
			`{"plan":{"components":{"vae":{"placement":"stream","tier":"host","prefetch":1},"image_encoder":{"placement":"stream","prefetch":1},"transformer":{"placement":"stream","tier":"disk","prefetch":1},"text_encoder":{"placement":"stream","prefetch":1}}},
			  "predicted":{"components":[{"name":"text_encoder"},{"name":"transformer"},{"name":"vae"}]}}`,
			"te=stream/k1 dit=stream/k1/disk vae=stream/k1"},
		{"an image encoder the model has",
			`{"plan":{"components":{"vae":{"placement":"host"},"image_encoder":{"placement":"onload"},"transformer_2":{"placement":"stream","prefetch":2,"persistent":3},"transformer":{},"text_encoder":{"placement":"host"}},"run":{"cfg":"sequential","ffn_chunk":4096}},
			  "predicted":{"components":[{"name":"text_encoder"},{"name":"image_encoder"},{"name":"transformer"},{"name":"transformer_2"},{"name":"vae"}]}}`,
			"te=host image_encoder=onload dit=resident transformer_2=stream/k2n3 vae=host cfg=sequential ffn=4096"},
		{"no prediction: every component",
			`{"plan":{"components":{"vae":{"placement":"host"},"extra":{"placement":"host"},"image_encoder":{"placement":"host"}}}}`,
			"image_encoder=host vae=host extra=host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r report
			if err := json.Unmarshal([]byte(tt.report), &r); err != nil {
				t.Fatal(err)
			}
			for range 20 { // map order changes from call to call
				if got := describe(r); got != tt.want {
					t.Fatalf("describe = %q, want %q", got, tt.want)
				}
			}
		})
	}
}
