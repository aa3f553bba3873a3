package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// completion is a checked completion request: one backend request per
// prompt, and what the answer shows.
type completion struct {
	id        string
	reqs      []backend.GenerateRequest
	texts     []string // the prompts given as text ("" for token ids)
	n         int
	top       int // alternatives per position in the log-prob block; -1: no block
	echo      bool
	promptTop int // vLLM's prompt_logprobs; -1: none
	usage     bool
	contUsage bool
	asIDs     bool
	stopIDs   []int
}

func (s *server) planCompletion(r *http.Request, req *openai.CompletionRequest) (*completion, error) {
	p := &completion{top: -1, echo: req.Echo, asIDs: req.ReturnTokensAsTokenIDs, stopIDs: req.StopTokenIDs}
	if req.Prompt.Len() == 0 {
		return nil, badRequest("prompt", "prompt is required")
	}
	for i, t := range req.Prompt.Texts {
		if t == "" {
			return nil, badRequest("prompt", "prompt[%d] is empty", i)
		}
	}
	for i, ids := range req.Prompt.IDs {
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt[%d] has no tokens", i)
		}
	}
	sp, n, err := s.sampling(common{maxTokens: req.MaxTokens, defMax: s.cfg.DefaultMaxTokens, zeroMax: req.Echo,
		temp: req.Temperature, topP: req.TopP, n: req.N, seed: req.Seed, stop: req.Stop, stream: req.Stream, sp: &req.SamplingParams})
	if err != nil {
		return nil, err
	}
	p.n = n
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > s.cfg.MaxTopLogprobs {
			return nil, badRequest("logprobs", "logprobs = %d, want in [0, %d]", *req.Logprobs, s.cfg.MaxTopLogprobs)
		}
		p.top = *req.Logprobs
	}
	if p.promptTop, err = s.promptLogprobs(&req.SamplingParams, req.Stream); err != nil {
		return nil, err
	}
	if req.Stream && req.Echo && p.top >= 0 {
		return nil, badRequest("echo", "echo with logprobs while streaming is not supported by evolm serve; ask without stream")
	}
	f, err := format(&req.SamplingParams)
	if err != nil {
		return nil, err
	}
	if p.usage, p.contUsage, err = streamOptions(&req.SamplingParams, req.Stream); err != nil {
		return nil, err
	}
	p.id = newID("cmpl-")
	if req.RequestID != "" {
		p.id = "cmpl-" + req.RequestID
	}
	// An echo with max_tokens 0 generates nothing: the engine runs the
	// prompt alone (scoring it), as vLLM does.
	scorePrompt := req.Echo && (p.top >= 0 || sp.MaxTokens == 0) || p.promptTop >= 0
	sp.Format = f
	mk := func(i int) backend.GenerateRequest {
		return backend.GenerateRequest{ID: fmt.Sprintf("%s-%d", p.id, i), N: n, Sampling: sp,
			LogProbs: p.top >= 0, TopLogProbs: max(p.top, 0), PromptLogProbs: scorePrompt,
			PromptTopLogProbs: max(p.top, p.promptTop, 0), Done: r.Context().Done()}
	}
	for i, t := range req.Prompt.Texts {
		q := mk(i)
		q.Prompt = t
		p.reqs, p.texts = append(p.reqs, q), append(p.texts, t)
	}
	for i, ids := range req.Prompt.IDs {
		q := mk(i)
		q.PromptTokenIDs = ids
		p.reqs, p.texts = append(p.reqs, q), append(p.texts, "")
	}
	return p, nil
}

func (s *server) doCompletions(w http.ResponseWriter, r *http.Request, req *openai.CompletionRequest, e *entry) error {
	p, err := s.planCompletion(r, req)
	if err != nil {
		return err
	}
	if req.Stream {
		return s.streamCompletion(w, r, p, e)
	}
	resps, err := s.generate(r.Context(), e, p.reqs)
	if err != nil {
		return err
	}
	out := openai.CompletionResponse{ID: p.id, Object: "text_completion", Created: time.Now().Unix(), Model: e.id, Usage: &openai.Usage{},
		Metadata: s.metadata(e)}
	for i := range resps {
		res := &resps[i]
		out.Usage.PromptTokens += max(res.PromptTokens, 0)
		for _, c := range res.Completions {
			ch := openai.CompletionChoice{Index: i*p.n + c.Index, Text: c.Text, FinishReason: string(c.FinishReason), StopReason: stopReason(c, p.stopIDs)}
			if p.echo {
				ch.Text = s.promptText(e, res, p.texts[i]) + c.Text
			}
			if p.top >= 0 {
				l := newLegacy(p.top, p.asIDs, 0)
				if p.echo {
					s.echoLogprobs(l, e, res)
				}
				for _, t := range c.LogProbs {
					l.sampled(t)
				}
				ch.Logprobs = l.out
			}
			if p.promptTop >= 0 {
				ch.PromptLogprobs = vllmPromptLogprobs(res, p.promptTop)
			}
			out.Choices = append(out.Choices, ch)
			out.Usage.CompletionTokens += tokenCount(c)
		}
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, out)
	return nil
}

// promptText is the prompt as the model saw it: the engine's decoding, or
// the text the request gave.
func (s *server) promptText(e *entry, res *backend.GenerateResponse, given string) string {
	if res.PromptText != "" {
		return res.PromptText
	}
	if given == "" && e.eng.Tokenizer != nil && len(res.PromptTokenIDs) > 0 {
		if t, err := e.eng.Tokenizer.Detokenize(res.PromptTokenIDs); err == nil {
			return t
		}
	}
	return given
}

// echoLogprobs puts the prompt's tokens at the head of a log-prob block:
// the first without a log-prob, as vLLM gives it.
func (s *server) echoLogprobs(l *legacyLogprobs, e *entry, res *backend.GenerateResponse) {
	if len(res.PromptTokenIDs) == 0 {
		return
	}
	first := ""
	switch {
	case l.asIDs:
		first = openai.TokenIDString(res.PromptTokenIDs[0])
	case e.eng.Tokenizer != nil:
		first, _ = e.eng.Tokenizer.Detokenize(res.PromptTokenIDs[:1])
	}
	l.first(first)
	for _, pl := range res.PromptLogProbs {
		l.prompt(pl)
	}
}

// generate runs the model of e and maps its failures to API errors.
func (s *server) generate(ctx context.Context, e *entry, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, badRequest("", "%v", err)
		}
	}
	resps, err := e.gen.Generate(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if len(resps) != len(reqs) {
		return nil, fmt.Errorf("generate: %d responses for %d requests", len(resps), len(reqs))
	}
	for i, r := range resps {
		if r.Failure != nil {
			if r.Failure.Reason == backend.FailureRejected {
				return nil, badRequest("", "%s", r.Failure.Message)
			}
			return nil, fmt.Errorf("generate: %w", r.Failure)
		}
		if len(r.Completions) != reqs[i].Samples() {
			return nil, fmt.Errorf("generate: %d completions, want %d", len(r.Completions), reqs[i].Samples())
		}
		if reqs[i].PromptLogProbs && r.PromptLogProbs == nil {
			return nil, fmt.Errorf("generate: the engine gave no prompt log-probs")
		}
	}
	return resps, nil
}

// metadata is an answer's SGLang metadata block: the weight version, sent
// by a server whose weights can change.
func (s *server) metadata(e *entry) *openai.ResponseMetadata {
	if !s.cfg.WeightUpdates && !s.cfg.RuntimeLoRA {
		return nil
	}
	return &openai.ResponseMetadata{WeightVersion: e.version}
}
