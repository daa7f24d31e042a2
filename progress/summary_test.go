package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

const gib = 1 << 30

func sampleSummary() Summary {
	return Summary{
		Title: "Wan2.1-T2V-1.3B 480x832, 81 frames",
		Plan:  "stream, prefetch 2",
		Components: []ComponentStat{
			{Name: "text_encoder", Placement: "host", Peak: 4 * gib, Budget: 16 * gib, Predicted: 4 * gib, Time: 12 * time.Second},
			{Name: "transformer", Placement: "stream, prefetch 2", Peak: 9 * gib, Budget: 8 * gib, Predicted: 6 * gib, Time: 80 * time.Second},
			{Name: "vae", Placement: "device", Peak: gib / 2, Budget: 8 * gib},
		},
		Memory: []MemoryStat{
			{Name: "device", Peak: 9 * gib, Budget: 8 * gib, Predicted: 6 * gib},
			{Name: "RSS", Peak: 11 * gib},
		},
		Phases: []PhaseStat{
			{Name: "text_encoder", Time: 12 * time.Second},
			{Name: "denoise", Time: 80 * time.Second, Units: 32, Unit: "steps"},
		},
		Total:       100 * time.Second,
		CopyWait:    2 * time.Second,
		CopyTime:    40 * time.Second,
		BytesCopied: 80e9,
		Outputs:     []string{"out.mp4", "report.json"},
	}
}

func TestSummaryLines(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleSummary().Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"ferry: done in 1m40s (Wan2.1-T2V-1.3B 480x832, 81 frames, plan stream, prefetch 2)",
		"113% OVER", // transformer peak 9 of 8 GiB
		"+50%",      // 9 GiB measured vs 6 predicted
		"+0%",       // text encoder as predicted
		"25%",       // text encoder 4 of 16 GiB
		"peak 9.00 GiB of 8.00 GiB (113% OVER), predicted 6.00 GiB (+50%)",
		"RSS     peak 11.0 GiB",
		"denoise 1m20s (32 steps, 2.50 s/it)",
		"wait 2.0s (2.0% of the run), 74.5 GiB moved in 40.0s (2.0 GB/s)",
		"wrote   out.mp4",
		"wrote   report.json",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// TestSummaryColumnsAlign checks each column of the component table starts
// at the same offset on every row.
func TestSummaryColumnsAlign(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleSummary().Write(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	table := lines[1:5] // header and three components
	header := table[0]
	for _, col := range []string{"placement", "peak", "budget", "used", "predicted", "error", "time"} {
		at := strings.Index(header, col)
		for _, row := range table[1:] {
			if at >= len(row) || row[at-1] != ' ' || row[at] == ' ' {
				t.Errorf("column %q (offset %d) misaligned in %q", col, at, row)
			}
		}
	}
	if !strings.Contains(table[3], "vae") || !strings.Contains(table[3], "-") {
		t.Errorf("unknown figures should print as -: %q", table[3])
	}
}

func TestSummaryEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := (Summary{}).Write(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "ferry: done\n" {
		t.Fatalf("empty summary %q", buf.String())
	}
}

func TestFormatBytes(t *testing.T) {
	cases := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1536, "1.50 KiB"},
		{200 << 20, "200 MiB"},
		{6 << 30, "6.00 GiB"},
		{11 << 30, "11.0 GiB"},
		{3 << 40, "3.00 TiB"},
	}
	for _, c := range cases {
		if got := FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
