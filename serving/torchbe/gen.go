package torchbe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/serving/backend"
)

// RenderChat renders a conversation with the checkpoint's chat template;
// thinking follows opt.EnableThinking when set, else
// Options.DisableThinking.
func (m *Model) RenderChat(msgs []chat.Message, opt chat.Options) (string, error) {
	opt.DisableThinking = m.opt.DisableThinking
	return chat.Render(msgs, opt)
}

// renderMessages renders backend messages with the generation prompt, as
// the engine renders a request's Messages.
func (m *Model) renderMessages(msgs []backend.Message) (string, error) {
	cm := make([]chat.Message, len(msgs))
	for i, msg := range msgs {
		cm[i] = chat.Message{Role: msg.Role, Content: msg.Content}
	}
	return m.RenderChat(cm, chat.Options{AddGenerationPrompt: true})
}

// prompt returns the token ids of a request's prompt and, when they are
// not the request's Prompt text (token ids, a chat, a truncated prompt),
// their decoding.
func (m *Model) prompt(r *backend.GenerateRequest) (ids []int, text string, err error) {
	text = r.Prompt
	switch {
	case len(r.PromptTokenIDs) > 0:
		vocab := m.vocab
		for i, id := range r.PromptTokenIDs {
			if id < 0 || id >= vocab {
				return nil, "", fmt.Errorf("prompt token %d (position %d) is outside the vocabulary [0, %d)", id, i, vocab)
			}
		}
		ids, text = slices.Clone(r.PromptTokenIDs), ""
	case len(r.Messages) > 0:
		if text, err = m.renderMessages(r.Messages); err != nil {
			return nil, "", err
		}
		ids = m.tok.Encode(text)
	default:
		ids = m.tok.Encode(text)
	}
	if k := r.TruncatePromptTokens; k > 0 {
		if m.maxLen > 0 && k > m.maxLen {
			return nil, "", fmt.Errorf("truncate_prompt_tokens %d exceeds the model's maximum context length %d", k, m.maxLen)
		}
		if len(ids) > k {
			ids, text = ids[len(ids)-k:], ""
		}
	}
	if len(ids) == 0 {
		return nil, "", errors.New("prompt encodes to no tokens")
	}
	if text == "" {
		if text, err = m.tok.Decode(ids, false); err != nil {
			return nil, "", err
		}
	}
	if m.maxLen > 0 && len(ids)+r.MaxTokens > m.maxLen {
		// vLLM's wording, which clients match on.
		return nil, "", fmt.Errorf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			m.maxLen, len(ids)+r.MaxTokens, len(ids), r.MaxTokens)
	}
	return ids, text, nil
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func rejected(format string, args ...any) *backend.RowFailure {
	return &backend.RowFailure{Reason: backend.FailureRejected, Message: fmt.Sprintf(format, args...)}
}

// tokenText is the decoded text of one token, cached.
func (m *Model) tokenText(id int) string {
	if v, ok := m.decoded.Load(id); ok {
		return v.(string)
	}
	s, err := m.tok.Decode([]int{id}, false)
	if err != nil {
		s = ""
	}
	m.decoded.Store(id, s)
	return s
}

// engineRequest is the engine's request for r, whose prompt is ids; the
// format's validator, when it has one, checks the completions.
func (m *Model) engineRequest(r *backend.GenerateRequest, ids []int) (generate.Request, *format, error) {
	vocab := m.vocab
	inVocab := func(what string, ids []int) error {
		for _, id := range ids {
			if id < 0 || id >= vocab {
				return fmt.Errorf("%s token %d is outside the vocabulary [0, %d)", what, id, vocab)
			}
		}
		return nil
	}
	seed := randomSeed()
	if r.Seed != nil {
		seed = uint64(*r.Seed)
	}
	gr := generate.Request{
		Prompt: ids, N: r.Samples(), MaxNewTokens: r.MaxTokens, MinNewTokens: r.MinTokens, Seed: seed,
		Sampling:    sample.Params{Temperature: r.Temperature, TopK: r.TopK, TopP: r.TopP, MinP: r.MinP},
		StopStrings: r.Stop, IncludeStop: r.IncludeStopStr, KeepSpecial: r.KeepSpecialTokens,
		Penalties:   generate.Penalties{Repetition: r.RepetitionPenalty, Frequency: r.FrequencyPenalty, Presence: r.PresencePenalty},
		TopLogProbs: r.TopLogProbs, PromptLogProbs: r.PromptLogProbs, PromptTop: r.PromptTopLogProbs, Done: r.Done,
	}
	if !r.IgnoreEOS {
		gr.StopTokens = slices.Clone(m.stop)
	}
	if err := inVocab("stop", r.StopTokenIDs); err != nil {
		return gr, nil, err
	}
	gr.StopTokens = append(gr.StopTokens, r.StopTokenIDs...)
	if len(r.AllowedTokenIDs) > 0 {
		if err := inVocab("allowed", r.AllowedTokenIDs); err != nil {
			return gr, nil, err
		}
		gr.AllowedTokens = r.AllowedTokenIDs
	}
	if len(r.LogitBias) > 0 {
		gr.LogitBias = make(map[int]float64, len(r.LogitBias))
		for id, v := range r.LogitBias {
			if err := inVocab("logit_bias", []int{id}); err != nil {
				return gr, nil, err
			}
			gr.LogitBias[id] = math.Max(-100, math.Min(100, v))
		}
	}
	for _, w := range r.BadWords {
		gr.BadWords = append(gr.BadWords, m.badWord(w)...)
	}
	if r.Stream != nil {
		gr.Stream = m.streamTo(r)
	}
	var f *format
	if r.Format != nil {
		var err error
		if f, err = m.format(r.Format); err != nil {
			return gr, nil, err
		}
		if r.MinTokens > 0 {
			return gr, nil, errors.New("min_tokens cannot be combined with a response format: a complete value must be able to end")
		}
		if need := f.g.MinTokens(); r.MaxTokens < need {
			return gr, nil, fmt.Errorf("max_tokens %d is too small for the response format: its shortest value takes %d tokens", r.MaxTokens, need)
		}
		if len(gr.StopTokens) == 0 {
			return gr, nil, errors.New("a response format needs an end token: ignore_eos without stop_token_ids leaves none")
		}
		gr.Constrain = func() generate.Constraint { return f.g.New() }
	}
	return gr, f, nil
}

// badWord is a bad word's token sequences as vLLM makes them: the word
// (left-trimmed) alone, and after a space when that starts with another
// token and is as long.
func (m *Model) badWord(w string) [][]int {
	a := m.tok.Encode(strings.TrimLeft(w, " \t\n\r\v\f"))
	out := [][]int{a}
	b := m.tok.Encode(" " + strings.TrimLeft(w, " \t\n\r\v\f"))
	if len(a) > 0 && len(b) == len(a) && b[0] != a[0] {
		out = append(out, b)
	}
	return out
}

// streamTo turns the engine's deltas into r's StreamDeltas.
func (m *Model) streamTo(r *backend.GenerateRequest) func(generate.Delta) {
	return func(d generate.Delta) {
		sd := backend.StreamDelta{Index: d.Sample, Text: d.Text, LogProbs: make([]backend.TokenLogProb, len(d.Tokens))}
		for t, id := range d.Tokens {
			sd.LogProbs[t] = m.tokenLogProb(id, d.LogProbs[t], d.Top, t)
		}
		r.Stream(sd)
	}
}

func (m *Model) tokenLogProb(id int, lp float32, top [][]generate.Alt, t int) backend.TokenLogProb {
	tl := backend.TokenLogProb{Token: m.tokenText(id), TokenID: id, LogProb: float64(lp)}
	if top != nil && t < len(top) {
		tl.Top = make([]backend.TopLogProb, len(top[t]))
		for j, a := range top[t] {
			tl.Top[j] = backend.TopLogProb{Token: m.tokenText(a.ID), LogProb: float64(a.LogProb)}
		}
	}
	return tl
}

// Generate answers every request when all are done; see GenerateEach.
func (m *Model) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	if err := m.GenerateEach(ctx, reqs, func(i int, r backend.GenerateResponse) { out[i] = r }); err != nil {
		return nil, err
	}
	return out, nil
}

// admitted is a request GenerateEach runs: the engine's request, its
// response so far and its format.
type admitted struct {
	i    int
	gr   generate.Request
	resp backend.GenerateResponse
	f    *format
}

// GenerateEach implements backend.EachGenerator: a request is answered as
// soon as its samples are done (a rejected one at once), on the calling
// goroutine.
func (m *Model) GenerateEach(ctx context.Context, reqs []backend.GenerateRequest, deliver func(int, backend.GenerateResponse)) (err error) {
	defer recoverEngine("torch generate", &err)
	if err := backend.CheckRequests(reqs, func(r *backend.GenerateRequest) string { return r.ID }); err != nil {
		return fmt.Errorf("torch generate: %w", err)
	}
	if m.closed.Load() {
		return errors.New("torch generate: model is closed")
	}
	var runs []admitted
	for i := range reqs {
		r := &reqs[i]
		resp := backend.GenerateResponse{ID: r.ID, Model: m.id, PromptTokens: -1}
		ids, text, err := m.prompt(r)
		var gr generate.Request
		var f *format
		if err == nil {
			gr, f, err = m.engineRequest(r, ids)
		}
		if err == nil {
			err = m.gen.Admit([]generate.Request{gr})
		}
		if err != nil {
			resp.Failure = rejected("request %s: %v", r.ID, err)
			deliver(i, resp)
			continue
		}
		resp.PromptTokens, resp.PromptTokenIDs, resp.PromptText = len(ids), ids, text
		runs = append(runs, admitted{i: i, gr: gr, resp: resp, f: f})
	}
	if len(runs) == 0 {
		return nil
	}
	return generateOnEngine(ctx, m, func(send func(int, backend.GenerateResponse)) error {
		return m.generate(ctx, reqs, runs, send)
	}, deliver)
}

// generate runs GenerateEach's admitted requests on the engine.
func (m *Model) generate(ctx context.Context, reqs []backend.GenerateRequest, runs []admitted, deliver func(int, backend.GenerateResponse)) (err error) {
	defer recoverEngine("torch generate", &err)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.gone() {
		return errors.New("torch generate: model is closed")
	}
	greqs := make([]generate.Request, len(runs))
	for k := range runs {
		greqs[k] = runs[k].gr
	}
	var failed error // the first request whose answer could not be built
	err = m.gen.GenerateEach(ctx, greqs, func(k int, samples []generate.Sample) {
		if failed != nil {
			return
		}
		run := &runs[k]
		resp, err := m.response(&reqs[run.i], run, samples)
		if err != nil {
			failed = fmt.Errorf("torch generate: request %s: %w", reqs[run.i].ID, err)
			return
		}
		deliver(run.i, resp)
	})
	if err != nil {
		return fmt.Errorf("torch generate: %w", err)
	}
	return failed
}

// response builds the answer to r from its samples.
func (m *Model) response(r *backend.GenerateRequest, run *admitted, samples []generate.Sample) (backend.GenerateResponse, error) {
	resp := run.resp
	resp.Completions = make([]backend.Completion, len(samples))
	for j, smp := range samples {
		c := backend.Completion{
			Index: j, Text: smp.Text, TokenIDs: smp.Tokens, TokenSource: backend.TokensEngine, Tokens: len(smp.Tokens),
			FinishReason: backend.FinishReason(smp.FinishReason), StopString: smp.StopString,
		}
		if smp.StopToken >= 0 {
			id := smp.StopToken
			c.StopTokenID = &id
		}
		if r.LogProbs || r.TopLogProbs > 0 {
			c.LogProbs = make([]backend.TokenLogProb, len(smp.Tokens))
			for t, id := range smp.Tokens {
				c.LogProbs[t] = m.tokenLogProb(id, smp.LogProbs[t], smp.Top, t)
			}
		}
		if run.f != nil && smp.FinishReason == generate.FinishStop && smp.StopString == "" {
			// A constrained sample that ended on an end token holds a
			// complete value: the independent validator must agree.
			if err := run.f.check(smp.Text); err != nil {
				return resp, fmt.Errorf("completion %d breaks its response format: %q: %w", j, smp.Text, err)
			}
		}
		resp.Completions[j] = c
	}
	if r.PromptLogProbs && len(samples) > 0 {
		ids := run.gr.Prompt
		resp.PromptLogProbs = make([]backend.PromptLogProb, len(samples[0].Prompt))
		for p, pos := range samples[0].Prompt {
			pl := backend.PromptLogProb{TokenID: ids[p+1], Token: m.tokenText(ids[p+1]), LogProb: float64(pos.LogProb), Rank: pos.Rank}
			for k, a := range pos.Top {
				pl.Top = append(pl.Top, backend.RankedLogProb{TokenID: a.ID, Token: m.tokenText(a.ID), LogProb: float64(a.LogProb), Rank: k + 1})
			}
			resp.PromptLogProbs[p] = pl
		}
	}
	return resp, nil
}
