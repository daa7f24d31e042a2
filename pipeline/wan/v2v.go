package wan

import (
	"fmt"
	"math"
	"slices"

	"ferry/pipeline"
	"ferry/sampler"
)

// Video to video (diffusers' WanVideoToVideoPipeline, 0.40.0, which loads
// a text-to-video folder): each frame of the input video is resized to the
// request's size as an image-to-video image is, the VAE encodes the video
// (its posterior mean, normalised), and the noise the seed draws is mixed
// in at the step where denoising starts: strength s runs the last
// min(int(N·s), N) of the N steps' schedule, from
//
//	latents = (1 − σ)·video latents + σ·noise
//
// with σ that step's sigma (UniPC's add_noise with flow sigmas, and
// flow-match Euler's scale_noise, are both this).

// DefaultStrength is WanVideoToVideoPipeline's strength.
const DefaultStrength = 0.8

// startStep is get_timesteps' t_start: the first of n steps that strength
// runs.
func startStep(n int, strength float64) int {
	runs := min(int(float64(n)*strength), n)
	return max(n-runs, 0)
}

// StepsRun is how many of n steps video to video runs at strength: the
// last min(int(n·strength), n).
func StepsRun(n int, strength float64) int { return n - startStep(n, strength) }

// VideoSteps is how many denoising steps a request runs: all of them, or
// from video to video StepsRun's.
func (r Request) VideoSteps() int {
	if r.Video == nil {
		return r.Steps
	}
	return StepsRun(r.Steps, r.Strength)
}

// CheckVideo checks a video-to-video request against the folder: a
// text-to-video folder with one transformer (the reference pipeline has
// no image condition and no second expert), a strength that runs at least
// one step, the video's frames the request's, and no initial latents
// beside it (the reference refuses both).
func (p *Pipeline) CheckVideo(r Request) error {
	if r.Video == nil {
		return nil
	}
	switch s := r.Strength; {
	case !p.ext.v2v:
		return fmt.Errorf("video to video needs SetVideoMode(true) before Register: the VAE's encoder is not registered")
	case p.ext.i2v:
		return fmt.Errorf("video to video takes a text-to-video folder (WanVideoToVideoPipeline loads one); this one runs image to video")
	case p.TwoExperts():
		return fmt.Errorf("video to video runs one transformer, as WanVideoToVideoPipeline does; this folder has two experts (Wan 2.2 A14B)")
	case r.Latents != nil:
		return fmt.Errorf("a video and initial latents both set the starting latents; give one")
	case math.IsNaN(s) || s <= 0 || s > 1:
		return fmt.Errorf("strength must be in (0, 1], got %g", s)
	case startStep(r.Steps, s) >= r.Steps:
		return fmt.Errorf("strength %g runs no step of %d (int(steps·strength) is 0): raise the strength or the steps", s, r.Steps)
	case len(r.Video) != r.Frames:
		return fmt.Errorf("the video has %d frames, the request %d", len(r.Video), r.Frames)
	}
	return nil
}

// prepareVideo encodes a video-to-video request's video: its latents
// [1, z, T, h, w], normalised; nil for other requests.
func (p *Pipeline) prepareVideo(rt *pipeline.Runtime, r Request, out *Output) ([]float32, error) {
	if r.Video == nil {
		return nil, nil
	}
	if err := p.CheckVideo(r); err != nil {
		return nil, err
	}
	// Timed with the conditioning, as the planner prices the encode.
	end := rt.Phase(pipeline.PhaseText)
	defer end()
	plane := r.Width * r.Height
	video := make([]float32, 3*r.Frames*plane)
	for f, img := range r.Video {
		px, err := vaeImage(img, r.Width, r.Height)
		if err != nil {
			return nil, fmt.Errorf("video frame %d: %w", f, err)
		}
		for ch := range 3 {
			copy(video[(ch*r.Frames+f)*plane:][:plane], px[ch*plane:(ch+1)*plane])
		}
	}
	lat, _, err := p.vaeEncode(rt, video, r.Frames, r.Height, r.Width, nil)
	if err != nil {
		return nil, err
	}
	if out.KeepIntermediates {
		out.VideoLatents = lat
	}
	return lat, nil
}

// noiseVideo mixes the noise into the video's latents at the step where a
// video-to-video request starts (add_noise at timesteps[t_start], the
// step found by its timestep as diffusers' index_for_timestep finds it),
// makes the scheduler start there, and returns that step.
func noiseVideo(s sampler.Scheduler, r Request, video, latents []float32) (int, error) {
	first := startStep(r.Steps, r.Strength)
	at := indexForTimestep(s, first)
	if at != first {
		return 0, fmt.Errorf("the schedule repeats the timestep of step %d: the reference would start a step late and run past its end; change the steps or the strength", first)
	}
	if err := s.SetBeginIndex(first); err != nil {
		return 0, err
	}
	alpha, sigma := s.NoiseScales(first)
	// Every video of a batch starts from the same video's latents, each
	// with its own noise.
	for off := 0; off < len(latents); off += len(video) {
		lat := latents[off : off+len(video)]
		for i, v := range video {
			// Two float32 products and a sum, unfused, as torch computes
			// alpha_t * original_samples + sigma_t * noise.
			lat[i] = float32(alpha*v) + float32(sigma*lat[i])
		}
	}
	return first, nil
}

// indexForTimestep is the scheduler's index_for_timestep for the timestep
// of step i: its first step, or the second where the schedule holds it
// twice. (UniPC's integer timesteps, at most num_train_timesteps, are
// exact as the float32 Timesteps gives them.)
func indexForTimestep(s sampler.Scheduler, i int) int {
	ts := s.Timesteps()
	first := slices.Index(ts, ts[i])
	if second := slices.Index(ts[first+1:], ts[i]); second >= 0 {
		return first + 1 + second
	}
	return first
}
