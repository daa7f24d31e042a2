package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"ferry/imageproc"
	"ferry/media"
	"ferry/pipeline/wan"
	"ferry/server/queue"
)

// Remix: POST /v1/videos/{id}/remix (OpenAI's) makes a new video from a
// completed one with a new prompt. ferry runs it as diffusers'
// WanVideoToVideoPipeline does: the source's frames, as the server stored
// them, are encoded by the VAE, noised to the step the strength starts at,
// and denoised under the new prompt. Everything else (model, size, frames,
// fps, seed, steps, guidance, plan, budgets, adapters) is the source's
// unless the body sets it.

// inputVideo is the queue input name of a remix's source video.
const inputVideo = "video"

// maxRemixBody bounds a remix body: a prompt and a few numbers.
const maxRemixBody = 1 << 20

// RemixRequest is the body of POST /v1/videos/{id}/remix: OpenAI's prompt,
// and ferry's video-to-video settings.
type RemixRequest struct {
	Prompt string `json:"prompt"`
	// Strength is how much of the schedule runs, in (0, 1]: the last
	// int(steps·strength) steps (WanVideoToVideoPipeline's strength, 0.8
	// by default). 1 keeps only the source's layout in the noise mix.
	Strength          *float64        `json:"strength,omitempty"`
	NegativePrompt    *string         `json:"negative_prompt,omitempty"`
	Seed              *uint64         `json:"seed,omitempty"`
	NumInferenceSteps int             `json:"num_inference_steps,omitempty"`
	GuidanceScale     *float64        `json:"guidance_scale,omitempty"`
	Outputs           []string        `json:"outputs,omitempty"`
	KeepAlive         json.RawMessage `json:"keep_alive,omitempty"`
}

// clip is a remix's source video: its bytes as stored, and its frames
// once decoded (nil at admission).
type clip struct {
	data   []byte
	frames []*imageproc.RGB
}

// remix is POST /v1/videos/{id}/remix.
func (s *Server) remix(w http.ResponseWriter, r *http.Request) {
	src, ok := s.lookup(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, maxRemixBody)
	if !ok {
		return
	}
	if src.Status != queue.StatusCompleted {
		writeError(w, http.StatusConflict, "video_not_ready", "id", fmt.Sprintf("the video is %s; a remix needs a completed one", src.Status))
		return
	}
	var sp spec
	if err := json.Unmarshal(src.Request, &sp); err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", "the source's stored request is unreadable: "+err.Error())
		return
	}
	sp, err := remixSpec(body, src.ID, sp)
	if err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			writeError(w, http.StatusBadRequest, "invalid_value", fe.param, fe.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	data, err := s.q.GetOutput(r.Context(), src.ID, "video")
	if errors.Is(err, queue.ErrNoOutput) {
		writeError(w, http.StatusConflict, "video_not_available", "id", "the video's file is gone (expired or deleted)")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	// Stored as the job's input; its frames are decoded when it runs
	// (loadVideo): admission needs only their count, the source's.
	sp.video = &clip{data: data}
	pred, err := s.models.admit(&sp)
	if s.admissionError(w, err) {
		return
	}
	s.enqueue(w, r, sp, pred)
}

// remixSpec is the source's spec with the remix body applied: a video to
// video request from the source's video.
func remixSpec(body []byte, srcID string, sp spec) (spec, error) {
	var req RemixRequest
	if err := decodeStrict(body, &req, "remix"); err != nil {
		return sp, err
	}
	switch {
	case len(req.Prompt) > maxPromptLen:
		return sp, badField("prompt", "longer than %d characters", maxPromptLen)
	case len(bytes.TrimSpace([]byte(req.Prompt))) == 0:
		return sp, badField("prompt", "is required")
	case sp.Image || sp.LastImage:
		return sp, badField("id", "the video was made from an image; a remix takes a text-to-video model's video")
	}
	sp.Prompt = req.Prompt
	sp.Strength = wan.DefaultStrength
	if req.Strength != nil {
		if g := *req.Strength; math.IsNaN(g) || g <= 0 || g > 1 {
			return sp, badField("strength", "want a number in (0, 1] (1 runs every step)")
		}
		sp.Strength = *req.Strength
	}
	if req.NegativePrompt != nil {
		if len(*req.NegativePrompt) > maxPromptLen {
			return sp, badField("negative_prompt", "longer than %d characters", maxPromptLen)
		}
		sp.NegativePrompt = *req.NegativePrompt
	}
	if req.Seed != nil {
		sp.Seed = *req.Seed
	}
	if req.NumInferenceSteps != 0 {
		if req.NumInferenceSteps < 0 || req.NumInferenceSteps > maxSteps {
			return sp, badField("num_inference_steps", "%d is outside 1..%d", req.NumInferenceSteps, maxSteps)
		}
		sp.Steps = req.NumInferenceSteps
	}
	if req.GuidanceScale != nil {
		if err := checkGuidance("guidance_scale", *req.GuidanceScale); err != nil {
			return sp, err
		}
		sp.Guidance = *req.GuidanceScale
	}
	if req.Outputs != nil {
		outs, err := outputVariants(req.Outputs)
		if err != nil {
			return sp, err
		}
		sp.Outputs = outs
	}
	if len(req.KeepAlive) > 0 {
		d, err := parseKeepAlive(req.KeepAlive)
		if err != nil {
			return sp, err
		}
		sp.KeepAlive = &d
	}
	if steps := wanRequest(sp).Steps; wan.StepsRun(steps, sp.Strength) < 1 {
		return sp, badField("strength", "%g runs no step of %d (int(steps·strength) is 0): raise the strength or num_inference_steps", sp.Strength, steps)
	}
	sp.RemixOf = srcID
	return sp, nil
}

// decodeClip decodes a stored video's first frames frames (all when
// frames is 0).
func decodeClip(data []byte, frames int) (*clip, error) {
	c, err := media.DecodeData(data, frames)
	if err != nil {
		return nil, err
	}
	if frames > 0 && len(c.Frames) != frames {
		return nil, fmt.Errorf("%d frames, the request %d", len(c.Frames), frames)
	}
	out := &clip{data: data}
	for i, px := range c.Frames {
		img, err := imageproc.NewRGB(c.Width, c.Height, px)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
		out.frames = append(out.frames, img)
	}
	return out, nil
}

// checkVideo refuses a remix the model cannot run: video to video takes a
// text-to-video folder with one transformer, as WanVideoToVideoPipeline
// does.
func checkVideo(m *model, s spec) error {
	switch p := m.planPipe; {
	case s.video == nil:
		return nil
	case p.RequiresImage():
		return badField("id", "model %s runs image to video; a remix takes a text-to-video model", m.name)
	case p.TwoExperts():
		return badField("id", "model %s has two experts (Wan 2.2 A14B); a remix runs one transformer, as WanVideoToVideoPipeline does", m.name)
	}
	return nil
}

// videoMode says s runs m's pipeline video to video: its VAE registers
// the encoder, in m's own runtime rather than a shared one.
func (m *model) videoMode(s spec) bool { return s.video != nil }

// loadVideo reads a remix's stored source video back into its spec.
func (s *Server) loadVideo(ctx context.Context, id string, sp *spec) error {
	if sp.RemixOf == "" {
		return nil
	}
	data, err := s.q.GetInput(ctx, id, inputVideo)
	if err != nil {
		return fmt.Errorf("read the job's source video: %w", err)
	}
	if sp.video, err = decodeClip(data, sp.Frames); err != nil {
		return fmt.Errorf("the job's source video: %w", err)
	}
	return nil
}
