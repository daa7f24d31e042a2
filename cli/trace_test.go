package cli

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/trace"
)

// TestTraceAndChart: a streamed run's --trace holds every copy and compute
// span in order (each streamed block's copy ends before its compute
// starts), and --chart is valid SVG with the device budget line.
func TestTraceAndChart(t *testing.T) {
	dir := t.TempDir()
	tr, svg := filepath.Join(dir, "t.json"), filepath.Join(dir, "c.svg")
	code, _, stderr := ferry(t, "generate", "--model", synthModel(t, "wan-tiny"), "--prompt", "a cat",
		"--height", "32", "--width", "32", "--frames", "5", "--steps", "2", "--plan", "stream",
		"--device-mem", "64MiB", "--out", filepath.Join(dir, "v.gif"), "--trace", tr, "--chart", svg, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, err := os.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ct, err := trace.ReadChrome(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.CheckOrder(ct.Spans); err != nil {
		t.Error(err)
	}
	copies, computes := map[string]bool{}, map[string]bool{}
	for _, s := range ct.Spans {
		switch s.Kind {
		case trace.Copy:
			copies[s.Name] = true
		case trace.Compute:
			computes[s.Name] = true
		}
	}
	for _, want := range []string{"text_encoder.block.0", "transformer.blocks.0", "transformer.out", "vae.decoder.mid"} {
		if !computes[want] {
			t.Errorf("no compute span for %s", want)
		}
	}
	for name := range computes {
		if !copies[name] && !strings.HasSuffix(name, ".embed") {
			t.Errorf("streamed block %s computed without a copy span", name)
		}
	}

	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	found := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not valid XML: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok {
			for _, a := range el.Attr {
				if a.Name.Local == "id" && a.Value == "level-device-budget" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Error("chart has no device budget line")
	}
}
