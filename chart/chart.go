// Package chart draws a run's memory over time: counter series (device
// allocated and reserved, host bytes, RSS) against budget and predicted-peak
// lines, with the pipeline's phases shaded and compute/copy/wait lanes
// underneath so stalls show at a glance.
//
// One scene (a list of lines, rectangles and text) is laid out from Data and
// then written either as SVG or rasterised to PNG with the standard library
// and a built-in bitmap font, so the two formats always agree.
package chart

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Data is everything a chart shows. Times are seconds since the run started;
// sizes are bytes.
type Data struct {
	Title    string // model, shape and plan, e.g. "Wan2.1-T2V-1.3B 480x832x81, stream prefetch 2"
	Subtitle string // optional second line
	Series   []Series
	Levels   []Level
	Phases   []Phase
	Lanes    []Lane
	// End is the last second on the time axis; 0: the latest time in the data.
	End float64
	// Width and Height in pixels; 0: DefaultWidth and DefaultHeight.
	Width, Height int
}

// Series is one counter over time, drawn as a step line (a value holds
// until the next point).
type Series struct {
	Name   string
	Points []Point
	// Peak is the exact peak to show in the legend (a trace may drop small
	// changes); 0: the largest point.
	Peak int64
	// Color is "#rrggbb"; "": chosen from the name or a palette.
	Color string
}

// Point is a counter value at a time.
type Point struct {
	T     float64 // seconds
	Bytes int64
}

// LevelKind says how a horizontal line is drawn.
type LevelKind uint8

// The level kinds: a budget is a solid line, a prediction a dashed one.
const (
	Budget LevelKind = iota
	Predicted
)

func (k LevelKind) String() string {
	if k == Predicted {
		return "predicted"
	}
	return "budget"
}

// Level is a horizontal line: a budget or a predicted peak.
type Level struct {
	Name  string // "device budget", "predicted device peak"
	Bytes int64
	Kind  LevelKind
	Color string // "#rrggbb"; "": red for device, orange for host
}

// Phase is a shaded interval of the run (text encode, denoise, VAE decode).
// Depth 0 phases shade the plot; deeper ones (denoise step i) are drawn as a
// strip along the plot's top edge.
type Phase struct {
	Name       string
	Start, End float64
	Depth      int
}

// Lane is one row of spans under the plot: compute, copy or wait.
type Lane struct {
	Name  string
	Spans []Span
	// MinWidth draws every span at least this many pixels wide (stalls of a
	// millisecond on a ten-minute axis must still show); 0: exact widths.
	MinWidth float64
	Color    string // "#rrggbb"; "": chosen from the name
}

// Span is one interval in a lane.
type Span struct {
	Name       string
	Start, End float64
}

// Default image size in pixels.
const (
	DefaultWidth  = 1400
	DefaultHeight = 700
)

// Formats Render writes.
const (
	SVG = "svg"
	PNG = "png"
)

// Render lays out data and writes it in format ("svg" or "png").
func Render(w io.Writer, data Data, format string) error {
	sc, err := layout(data)
	if err != nil {
		return err
	}
	switch format {
	case SVG:
		err = writeSVG(w, sc)
	case PNG:
		err = writePNG(w, sc)
	default:
		return fmt.Errorf("chart: unknown format %q: use %q or %q", format, SVG, PNG)
	}
	if err != nil {
		return fmt.Errorf("chart: write %s: %w", format, err)
	}
	return nil
}

// FormatFromPath picks the format from a file name's extension, so a CLI can
// reject "--chart out.jpg" before the run starts.
func FormatFromPath(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return SVG, nil
	case ".png":
		return PNG, nil
	default:
		return "", fmt.Errorf("chart file %q: extension %q is not supported: use .svg or .png", path, ext)
	}
}
