package wan

import "ferry/planner"

// PlanRequest is r as the planner prices it: the batch and its prompts,
// the prompts' real tokens (PromptTokens), the steps that run (a video to
// video request's share of them), the output, and the adapters.
func (p *Pipeline) PlanRequest(r Request) planner.Request {
	return planRequest(r, p.PromptTokens(r))
}

// planRequest is PlanRequest with the prompts' token count given.
func planRequest(r Request, promptTokens int) planner.Request {
	r.Defaults()
	return planner.Request{Batch: r.Videos(), Prompts: len(r.PromptList()), Frames: r.Frames, Height: r.Height, Width: r.Width,
		TextLen: r.MaxSeqLen, PromptTokens: promptTokens, Steps: r.VideoSteps(), Guidance: r.Guidance, FlowShift: r.FlowShift,
		LatentsOut: r.LatentsOut, AdapterBytes: LoRABytes(r.LoRAs), AdapterBytes2: LoRABytes(r.LoRAs2),
		LoRA: LoRARanks(r.LoRAs), LoRA2: LoRARanks(r.LoRAs2)}
}
