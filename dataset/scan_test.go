package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScan pairs clips with captions and names the file of every problem.
func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // name -> content
		names []string          // the samples, when it succeeds
		want  string            // in the error
	}{
		{"pairs", map[string]string{"b.gif": "x", "b.txt": " a dog \n", "a.MP4": "x", "a.TXT": "a cat", "notes.md": "", ".hidden.txt": ""}, []string{"a", "b"}, ""},
		{"caption without clip", map[string]string{"a.png": "x", "a.txt": "c", "lost.txt": "c"}, nil, "lost.txt is a caption without a clip"},
		{"clip without caption", map[string]string{"a.png": "x", "a.txt": "c", "b.avi": "x"}, nil, "b.avi has no caption"},
		{"two clips of a name", map[string]string{"a.png": "x", "a.jpg": "x", "a.txt": "c"}, nil, "share the name"},
		{"unusable name", map[string]string{`a\b.png`: "x", `a\b.txt`: "c"}, nil, "not a plain file name"},
		{"empty caption", map[string]string{"a.png": "x", "a.txt": " \n\t"}, nil, "a.txt is empty"},
		{"counts the rest", map[string]string{"a.png": "x", "b.png": "x", "c.txt": "x"}, nil, "and 2 more problems"},
		{"nothing", map[string]string{"readme.md": "x"}, nil, "no clips with captions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, c := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			os.Mkdir(filepath.Join(dir, "sub.txt"), 0o755) // folders are not captions
			got, err := Scan(dir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want one line with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Fatalf("samples %v, want %v", names, tc.names)
			}
			if got[1].Caption != "a dog" || got[0].Bytes != 1 || got[0].ModTime.IsZero() {
				t.Errorf("sample %+v, %+v", got[0], got[1])
			}
		})
	}
	if _, err := Scan(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "data folder") {
		t.Errorf("missing folder: %v", err)
	}
}
