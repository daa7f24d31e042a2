// Package server is ferry serve: an OpenAI-shaped video job server
// (POST /v1/videos and friends) that runs jobs through the Wan pipeline
// under memory budgets and keeps models resident between requests. Jobs
// live in a queue.Queue (the local journal by default), so a restart loses
// nothing.
package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/residency"
	"ferry/units"
)

// Limits on request fields: far above anything a model here runs, low
// enough that a request cannot make the planner or tokenizer do absurd
// work.
const (
	maxBodyBytes  = 2*maxImageBytes*4/3 + 1<<20 // two images in base64, and the rest
	maxPromptLen  = 20000
	maxSide       = 8192
	maxFrames     = 1025
	maxSteps      = 1000
	maxKeepAlive  = 7 * 24 * time.Hour
	defaultFPS    = 16
	defaultFrames = 9
)

// VideoRequest is the body of POST /v1/videos: OpenAI's fields as the open
// servers use them, and ferry's own (plan, dtype, budgets, outputs,
// keep_alive).
type VideoRequest struct {
	Prompt            string   `json:"prompt"`
	Model             string   `json:"model"`
	Size              string   `json:"size,omitempty"`
	Width             int      `json:"width,omitempty"`
	Height            int      `json:"height,omitempty"`
	NumFrames         int      `json:"num_frames,omitempty"`
	Seconds           seconds  `json:"seconds,omitempty"`
	FPS               float64  `json:"fps,omitempty"`
	Seed              *uint64  `json:"seed,omitempty"`
	NegativePrompt    string   `json:"negative_prompt,omitempty"`
	NumInferenceSteps int      `json:"num_inference_steps,omitempty"`
	GuidanceScale     *float64 `json:"guidance_scale,omitempty"`
	// GuidanceScale2 is the low-noise expert's scale on a Wan 2.2 A14B
	// model (diffusers' guidance_scale_2; unset: guidance_scale).
	GuidanceScale2 *float64 `json:"guidance_scale_2,omitempty"`
	FlowShift      float64  `json:"flow_shift,omitempty"`
	// Plan is a preset name, or a plan as YAML/JSON text (never a path:
	// the server does not read files a client names).
	Plan    string   `json:"plan,omitempty"`
	DType   string   `json:"dtype,omitempty"`
	Budgets *Budgets `json:"budgets,omitempty"`
	// Outputs lists the variants to keep (video always): report, trace,
	// chart, plan.
	Outputs []string `json:"outputs,omitempty"`
	// KeepAlive keeps the model resident after the job: a duration ("5m"),
	// seconds as a number, -1 forever, 0 unload at once. Unset: the
	// model's or server's default.
	KeepAlive json.RawMessage `json:"keep_alive,omitempty"`
	// LoRA applies adapters to the transformer, unmerged: "NAME[:SCALE]",
	// {"path": NAME, "scale": S}, or a list of them. NAME is a file under
	// the server's LoRA folders (--loras, a models folder's loras/).
	LoRA json.RawMessage `json:"lora,omitempty"`
	// LoRA2 is lora for the low-noise expert (transformer_2) of a Wan 2.2
	// A14B model, as `ferry generate --lora-2`.
	LoRA2 json.RawMessage `json:"lora_2,omitempty"`
	// InputReference is the first frame's image of an image-to-video
	// model (OpenAI's input_reference), a PNG or JPEG as a data URL
	// ("data:image/png;base64,...") or base64; LastImage the last frame's
	// (diffusers' last_image) of a first-last-frame model (images.go).
	InputReference string `json:"input_reference,omitempty"`
	LastImage      string `json:"last_image,omitempty"`
	// files are a multipart form's image files by field (decodeBody).
	files map[string][]byte
}

// seconds is a clip's length: a number, or the string OpenAI's API and
// SDKs send ("4", "8").
type seconds float64

func (s *seconds) UnmarshalJSON(b []byte) error {
	text := string(b)
	if unq, err := strconv.Unquote(text); err == nil {
		text = unq
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "seconds " + string(b), Type: reflect.TypeOf(0.0)}
	}
	*s = seconds(v)
	return nil
}

// Budgets lower the server's budgets for one request ("8GiB" or bytes).
type Budgets struct {
	DeviceMem string `json:"device_mem,omitempty"`
	HostMem   string `json:"host_mem,omitempty"`
}

// spec is a validated request, what the journal stores and a worker runs.
type spec struct {
	Prompt         string   `json:"prompt"`
	NegativePrompt string   `json:"negative_prompt,omitempty"`
	Model          string   `json:"model"`
	Width          int      `json:"width"`
	Height         int      `json:"height"`
	Frames         int      `json:"frames"`
	FPS            float64  `json:"fps"`
	Seed           uint64   `json:"seed"`
	Steps          int      `json:"steps"`
	Guidance       float64  `json:"guidance"`
	Guidance2      *float64 `json:"guidance_2,omitempty"`
	FlowShift      float64  `json:"flow_shift,omitempty"`
	Plan           string   `json:"plan,omitempty"`
	DType          string   `json:"dtype,omitempty"`
	DeviceBytes    int64    `json:"device_bytes,omitempty"`
	HostBytes      int64    `json:"host_bytes,omitempty"`
	Outputs        []string `json:"outputs"`
	// KeepAlive: nil the default, else a duration (negative: forever).
	KeepAlive *time.Duration `json:"keep_alive,omitempty"`
	// LoRAs name adapter files under the server's LoRA folders; loras are
	// them read, at admission and again at dispatch (never journaled).
	LoRAs []loraRef `json:"loras,omitempty"`
	loras []wan.LoRA
	// LoRAs2 are the low-noise expert's (lora_2).
	LoRAs2 []loraRef `json:"loras_2,omitempty"`
	loras2 []wan.LoRA
	// Image and LastImage say the job stored those inputs
	// (queue.PutInput); image and lastImage hold them, read at admission
	// and again at dispatch (never journaled).
	Image     bool `json:"image,omitempty"`
	LastImage bool `json:"last_image,omitempty"`
	image     *upload
	lastImage *upload
	// RemixOf is the video a remix is made from: the job stored that
	// video's file (inputVideo), which video holds, its frames decoded
	// when the job runs; Strength is how much of the schedule runs
	// (remix.go).
	RemixOf  string  `json:"remixed_from_video_id,omitempty"`
	Strength float64 `json:"strength,omitempty"`
	video    *clip
	// promptKey is the prompt cache's key for this job and prompts its
	// embeddings there (dispatch finds them; nil: the text encoder runs).
	promptKey string
	prompts   *encoded
}

// Variants of a job's content.
var variants = map[string]string{
	"video":  "video/mp4",
	"report": "application/json",
	"trace":  "application/json",
	"chart":  "image/svg+xml",
	"plan":   "application/yaml",
}

// fieldError is a 400 naming the field.
type fieldError struct {
	param string
	msg   string
}

func (e *fieldError) Error() string { return e.param + ": " + e.msg }

func badField(param, format string, a ...any) error {
	return &fieldError{param: param, msg: fmt.Sprintf(format, a...)}
}

// decodeRequest parses a POST /v1/videos body.
func decodeRequest(body []byte) (VideoRequest, error) {
	var r VideoRequest
	err := decodeStrict(body, &r, "videos")
	return r, err
}

// decodeStrict parses one JSON object of the named API into v, as a field
// error. Unknown fields are refused so a typo is not silently ignored.
func decodeStrict(body []byte, v any, api string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badField(te.Field, "wrong type: want %s", te.Type)
		}
		return badField("body", "not a JSON object of the %s API: %v", api, err)
	}
	if dec.More() {
		return badField("body", "trailing data after the JSON object")
	}
	return nil
}

// toSpec checks every field and fills defaults.
func (r VideoRequest) toSpec() (spec, error) {
	s := spec{Prompt: r.Prompt, NegativePrompt: r.NegativePrompt, Model: r.Model, Steps: r.NumInferenceSteps,
		FlowShift: r.FlowShift, Plan: r.Plan, DType: r.DType, Guidance: -1}
	if strings.TrimSpace(r.Prompt) == "" {
		return s, badField("prompt", "is required")
	}
	if len(r.Prompt) > maxPromptLen || len(r.NegativePrompt) > maxPromptLen {
		return s, badField("prompt", "longer than %d characters", maxPromptLen)
	}
	if r.Model == "" {
		return s, badField("model", "is required (GET /v1/residency lists the models)")
	}
	if err := r.shape(&s); err != nil {
		return s, err
	}
	if r.Seed != nil {
		s.Seed = *r.Seed
	}
	if s.Steps < 0 || s.Steps > maxSteps {
		return s, badField("num_inference_steps", "%d is outside 1..%d", s.Steps, maxSteps)
	}
	if r.GuidanceScale != nil {
		if err := checkGuidance("guidance_scale", *r.GuidanceScale); err != nil {
			return s, err
		}
		s.Guidance = *r.GuidanceScale
	}
	if r.GuidanceScale2 != nil {
		if err := checkGuidance("guidance_scale_2", *r.GuidanceScale2); err != nil {
			return s, err
		}
		g := *r.GuidanceScale2
		s.Guidance2 = &g
	}
	if math.IsNaN(r.FlowShift) || r.FlowShift < 0 || r.FlowShift > 100 {
		return s, badField("flow_shift", "want a number in 0..100")
	}
	if err := checkPlan(r.Plan); err != nil {
		return s, err
	}
	if _, err := pipeline.ParseComputeDType(r.DType, func() bool { return false }); err != nil {
		return s, badField("dtype", "%v", err)
	}
	if r.Budgets != nil {
		var err error
		if s.DeviceBytes, err = parseBudget("budgets.device_mem", r.Budgets.DeviceMem); err != nil {
			return s, err
		}
		if s.HostBytes, err = parseBudget("budgets.host_mem", r.Budgets.HostMem); err != nil {
			return s, err
		}
	}
	var err error
	if s.Outputs, err = outputVariants(r.Outputs); err != nil {
		return s, err
	}
	if len(r.KeepAlive) > 0 {
		d, err := parseKeepAlive(r.KeepAlive)
		if err != nil {
			return s, err
		}
		s.KeepAlive = &d
	}
	if s.LoRAs, err = parseLoRAs("lora", r.LoRA); err != nil {
		return s, err
	}
	if s.LoRAs2, err = parseLoRAs("lora_2", r.LoRA2); err != nil {
		return s, err
	}
	if s.image, err = r.image("input_reference", r.InputReference); err != nil {
		return s, err
	}
	if s.lastImage, err = r.image("last_image", r.LastImage); err != nil {
		return s, err
	}
	s.Image, s.LastImage = s.image != nil, s.lastImage != nil
	return s, nil
}

// outputVariants checks a request's outputs: the variants to keep, video
// always first.
func outputVariants(vs []string) ([]string, error) {
	out := []string{"video"}
	for _, v := range vs {
		if _, ok := variants[v]; !ok {
			return nil, badField("outputs", "unknown variant %q (want video, report, trace, chart, plan)", v)
		}
		if v != "video" && !contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

func checkGuidance(field string, g float64) error {
	if math.IsNaN(g) || g < 0 || g > 100 {
		return badField(field, "want a number in 0..100")
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// shape resolves size/width/height and num_frames/seconds/fps.
func (r VideoRequest) shape(s *spec) error {
	w, h := r.Width, r.Height
	if r.Size != "" {
		a, b, ok := strings.Cut(strings.ToLower(r.Size), "x")
		sw, err1 := strconv.Atoi(a)
		sh, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return badField("size", "%q is not WIDTHxHEIGHT (e.g. 832x480)", r.Size)
		}
		if (w != 0 && w != sw) || (h != 0 && h != sh) {
			return badField("size", "%s disagrees with width/height; give one or the other", r.Size)
		}
		w, h = sw, sh
	}
	if w == 0 || h == 0 {
		return badField("size", "is required: size \"WxH\" or width and height")
	}
	if w < 16 || h < 16 || w > maxSide || h > maxSide || w%16 != 0 || h%16 != 0 {
		return badField("size", "%dx%d: each side must be a multiple of 16 in 16..%d", w, h, maxSide)
	}
	s.Width, s.Height = w, h
	s.FPS = r.FPS
	if math.IsNaN(s.FPS) || s.FPS < 0 || s.FPS > 240 {
		return badField("fps", "want a number in 1..240")
	}
	if s.FPS == 0 {
		s.FPS = defaultFPS
	}
	f := r.NumFrames
	if sec := float64(r.Seconds); f == 0 && sec != 0 {
		if math.IsNaN(sec) || sec < 0 || sec*s.FPS > maxFrames {
			return badField("seconds", "want a duration of at most %d frames at %g fps", maxFrames, s.FPS)
		}
		// The nearest 4k+1 frame count to seconds·fps.
		f = int(math.Round((sec*s.FPS-1)/4))*4 + 1
		f = max(f, 1)
	}
	if f == 0 {
		f = defaultFrames
	}
	if f < 1 || f > maxFrames || (f-1)%4 != 0 {
		return badField("num_frames", "%d: want 4k+1 frames (1, 5, 9, ...) up to %d", f, maxFrames)
	}
	s.Frames = f
	return nil
}

// checkPlan accepts a preset name or plan text that parses.
func checkPlan(p string) error {
	if p == "" || !strings.ContainsAny(p, ":\n{") {
		return nil // a preset name; the planner checks it
	}
	if _, err := residency.ParsePlan([]byte(p)); err != nil {
		return badField("plan", "not a preset name nor a valid plan: %v", err)
	}
	return nil
}

func parseBudget(field, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := units.ParseSize(v)
	if err != nil || n <= 0 {
		return 0, badField(field, "%q is not a size (e.g. 8GiB)", v)
	}
	return n, nil
}

// parseKeepAlive reads "5m", 300, -1 or "-1".
func parseKeepAlive(raw json.RawMessage) (time.Duration, error) {
	var num float64
	if err := json.Unmarshal(raw, &num); err == nil {
		return secondsKeepAlive(num)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, badField("keep_alive", "want a duration (\"5m\"), seconds, or -1")
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return secondsKeepAlive(n)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d > maxKeepAlive {
		return 0, badField("keep_alive", "%q: want a duration up to 168h, seconds, or -1", s)
	}
	if d < 0 {
		return -1, nil
	}
	return d, nil
}

func secondsKeepAlive(n float64) (time.Duration, error) {
	if math.IsNaN(n) || n > maxKeepAlive.Seconds() {
		return 0, badField("keep_alive", "want seconds up to %d, or -1", int(maxKeepAlive.Seconds()))
	}
	if n < 0 {
		return -1, nil
	}
	return time.Duration(n * float64(time.Second)), nil
}

// apiError is OpenAI's error body.
type apiError struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// writeError writes an error in OpenAI's shape.
func writeError(w http.ResponseWriter, status int, code, param, msg string) {
	typ := "invalid_request_error"
	switch {
	case status >= 500:
		typ = "server_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	}
	body := apiError{Error: errorBody{Message: msg, Type: typ, Code: code}}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
