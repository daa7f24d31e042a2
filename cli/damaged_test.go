package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamagedConfigs: a config.json whose layer count no model has (1e9
// ran the process out of memory sizing the model's tables) is refused by
// plan and generate with one line naming the key, exit 2.
func TestDamagedConfigs(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	for _, c := range []struct{ comp, key string }{
		{"text_encoder", "num_layers"}, {"transformer", "num_layers"}, {"vae", "num_res_blocks"},
	} {
		t.Run(c.comp, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			if err := os.CopyFS(dir, os.DirFS(tiny)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, c.comp, "config.json")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			cfg[c.key] = 1000000000
			if raw, err = json.Marshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"plan", "--model", dir, "--height", "32", "--width", "32", "--frames", "1"},
				{"generate", "--model", dir, "--prompt", "x", "--height", "32", "--width", "32", "--frames", "1", "--steps", "1",
					"--out", filepath.Join(t.TempDir(), "v.safetensors"), "--quiet"},
			} {
				code, _, stderr := ferry(t, args...)
				msg := strings.TrimSpace(stderr)
				if code != 2 || strings.Contains(msg, "\n") || !strings.Contains(msg, c.key) {
					t.Errorf("%s: exit %d, stderr %q: want exit 2 and one line naming %s", args[0], code, msg, c.key)
				}
			}
		})
	}
}
