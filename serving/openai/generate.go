package openai

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/evolm/evolm/serving/backend"
)

// Generate implements backend.Generator.
func (c *Client) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	if err := backend.CheckRequests(reqs, func(r *backend.GenerateRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("openai generate: %w", err)
	}
	out, err := eachRow(ctx, c, reqs, func(ctx context.Context, r *backend.GenerateRequest, led *ledger) (backend.GenerateResponse, error) {
		res, err := c.generateOne(ctx, r)
		if err != nil {
			return res, err
		}
		return res, led.commit(res.ID)
	})
	if err != nil {
		return nil, fmt.Errorf("openai generate: %w", err)
	}
	return out, nil
}

// eachRow answers every request with row, as many at a time as
// Client.group allows, and returns the answers in request order. The ledger
// is shared by the rows; the first error cancels the others and is returned.
func eachRow[Q, A any](ctx context.Context, c *Client, reqs []Q, row func(context.Context, *Q, *ledger) (A, error)) ([]A, error) {
	out := make([]A, len(reqs))
	led := newLedger(len(reqs))
	g, gctx := c.group(ctx)
	for i := range reqs {
		g.Go(func() error {
			a, err := row(gctx, &reqs[i], led)
			if err != nil {
				return err
			}
			out[i] = a
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// generateOne answers one request with one call. The client does not
// stream: a request with Stream gets one delta per completion, its whole
// text, once the answer has come.
func (c *Client) generateOne(ctx context.Context, r *backend.GenerateRequest) (backend.GenerateResponse, error) {
	n := r.Samples()
	res := backend.GenerateResponse{ID: r.ID, Model: c.cfg.Model, PromptTokens: -1}
	if len(r.BadWords) > 0 && len(r.Messages) == 0 {
		res.Failure = &backend.RowFailure{Reason: backend.FailureRejected,
			Message: "bad_words: vLLM's completions API has none (only chat completions take it)"}
		return res, nil
	}
	var err error
	if len(r.Messages) > 0 {
		err = c.chat(ctx, r, n, &res)
	} else {
		err = c.complete(ctx, r, n, &res)
	}
	if err != nil {
		f, ferr := rowFailure(err)
		if ferr != nil {
			return res, ferr
		}
		res.Failure, res.Completions = f, nil
	}
	if r.Stream != nil {
		for _, comp := range res.Completions {
			r.Stream(backend.StreamDelta{Index: comp.Index, Text: comp.Text, LogProbs: comp.LogProbs})
		}
	}
	return res, nil
}

// stopReason reads vLLM's stop_reason into comp: a stop string, or a stop
// token id (a JSON number).
func stopReason(comp *backend.Completion, v any) {
	switch x := v.(type) {
	case string:
		comp.StopString = x
	case float64:
		id := int(x)
		comp.StopTokenID = &id
	}
}

// promptLogprobs reads vLLM's prompt_logprobs (null first, then per
// prompt token the token's own entry, then the alternatives) into res.
func promptLogprobs(res *backend.GenerateResponse, pl []PromptLogprobs) error {
	if len(pl) == 0 {
		return &malformedError{"prompt_logprobs asked for but missing"}
	}
	res.PromptLogProbs = make([]backend.PromptLogProb, 0, len(pl)-1)
	for p, m := range pl[1:] {
		if len(m) == 0 {
			return &malformedError{fmt.Sprintf("prompt_logprobs[%d] is empty", p+1)}
		}
		var pos backend.PromptLogProb
		for k, e := range m {
			lp, err := logprob(e.Logprob)
			if err != nil {
				return &malformedError{fmt.Sprintf("prompt_logprobs[%d]: %v", p+1, err)}
			}
			if k == 0 {
				pos = backend.PromptLogProb{TokenID: e.TokenID, Token: e.DecodedToken, LogProb: lp, Rank: e.Rank}
				continue
			}
			pos.Top = append(pos.Top, backend.RankedLogProb{TokenID: e.TokenID, Token: e.DecodedToken, LogProb: lp, Rank: e.Rank})
		}
		if pos.Rank >= 1 && (len(pos.Top) == 0 || pos.Rank <= len(pos.Top)+1) {
			// The token is among the alternatives too: vLLM lists it once.
			pos.Top = slices.Insert(pos.Top, min(pos.Rank-1, len(pos.Top)), backend.RankedLogProb{TokenID: pos.TokenID, Token: pos.Token, LogProb: pos.LogProb, Rank: pos.Rank})
		}
		res.PromptLogProbs = append(res.PromptLogProbs, pos)
	}
	return nil
}

func sampling(r *backend.GenerateRequest) (maxTok *int, temp, topP *float64, seed *int64) {
	mt, t := r.MaxTokens, r.Temperature
	maxTok, temp = &mt, &t
	if r.TopP > 0 && r.TopP < 1 {
		p := r.TopP
		topP = &p
	}
	if r.Seed != nil {
		s := *r.Seed
		seed = &s
	}
	return
}

// samplingParams are r's vLLM sampling controls on the wire: every one
// that is not vLLM's default is sent, so that a server that lacks one
// refuses the request instead of answering something else.
func samplingParams(r *backend.GenerateRequest, tokenIDs bool) (SamplingParams, error) {
	p := SamplingParams{StopTokenIDs: r.StopTokenIDs, IncludeStopStrInOutput: r.IncludeStopStr, IgnoreEOS: r.IgnoreEOS,
		MinTokens: r.MinTokens, AllowedTokenIDs: r.AllowedTokenIDs, ReturnTokensAsTokenIDs: tokenIDs}
	opt := func(v, off float64) *float64 {
		if v == off {
			return nil
		}
		return &v
	}
	if r.TopK > 0 {
		k := r.TopK
		p.TopK = &k
	}
	p.MinP = opt(r.MinP, 0)
	if r.RepetitionPenalty != 0 {
		p.RepetitionPenalty = opt(r.RepetitionPenalty, 1)
	}
	p.PresencePenalty, p.FrequencyPenalty = opt(r.PresencePenalty, 0), opt(r.FrequencyPenalty, 0)
	if len(r.LogitBias) > 0 {
		p.LogitBias = make(map[string]float64, len(r.LogitBias))
		for id, v := range r.LogitBias {
			p.LogitBias[strconv.Itoa(id)] = v
		}
	}
	if r.KeepSpecialTokens {
		f := false
		p.SkipSpecialTokens = &f
	}
	if r.TruncatePromptTokens > 0 {
		k := r.TruncatePromptTokens
		p.TruncatePromptTokens = &k
	}
	if r.PromptLogProbs {
		k := r.PromptTopLogProbs
		p.PromptLogprobs = &k
	}
	if f := r.Format; f != nil {
		switch f.Type {
		case backend.FormatJSONObject:
			p.ResponseFormat = &ResponseFormat{Type: "json_object"}
		case backend.FormatJSONSchema:
			p.ResponseFormat = &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "output", Schema: f.Schema}}
		case backend.FormatChoice:
			p.GuidedChoice = f.Choices
		default:
			return p, fmt.Errorf("output format %q", f.Type)
		}
	}
	return p, nil
}

func (c *Client) complete(ctx context.Context, r *backend.GenerateRequest, n int, res *backend.GenerateResponse) error {
	sp, err := samplingParams(r, c.cfg.TokenIDs)
	if err != nil {
		return err
	}
	body := CompletionRequest{Model: c.cfg.Model, Prompt: Prompt{Texts: []string{r.Prompt}}, N: &n, Stop: r.Stop, SamplingParams: sp}
	if len(r.PromptTokenIDs) > 0 {
		body.Prompt = Prompt{IDs: [][]int{r.PromptTokenIDs}}
	}
	body.MaxTokens, body.Temperature, body.TopP, body.Seed = sampling(r)
	wantLP := r.LogProbs || r.TopLogProbs > 0
	// With n > 1 the usage block only has the total, so ask for log-probs
	// anyway to learn each sample's token count.
	if wantLP || n > 1 || c.cfg.TokenIDs {
		k := r.TopLogProbs
		body.Logprobs = &k
	}
	var resp CompletionResponse
	conv := func(ch CompletionChoice) (backend.Completion, error) {
		comp := backend.Completion{Index: ch.Index, Text: ch.Text, FinishReason: backend.FinishReason(ch.FinishReason), Tokens: -1}
		stopReason(&comp, ch.StopReason)
		var lps []backend.TokenLogProb
		if ch.Logprobs != nil {
			var err error
			if lps, err = fromCompletionLogprobs(ch.Logprobs); err != nil {
				return comp, err
			}
			// vLLM lists the sampled token among the alternatives too:
			// keep the k most likely asked for.
			for i := range lps {
				if len(lps[i].Top) > r.TopLogProbs {
					lps[i].Top = lps[i].Top[:r.TopLogProbs]
				}
				if len(lps[i].Top) == 0 {
					lps[i].Top = nil
				}
			}
		}
		c.tokenIDs(&comp, lps)
		return comp, keepLogprobs(&comp, lps, ch.Logprobs != nil, wantLP)
	}
	// The answer is checked as it is decoded: one that does not fit the
	// request is a failed attempt, retried.
	return c.call(ctx, r.ID, "/completions", body, checked(c, &resp, func() error {
		if err := finish(res, &resp, n, conv); err != nil || !r.PromptLogProbs {
			return err
		}
		return promptLogprobs(res, resp.Choices[0].PromptLogprobs)
	}))
}

// checked decodes an answer into resp, checks its version
// (Config.CheckModel) and then runs use on it: an error of use (a
// *malformedError) makes the answer a failed attempt.
func checked[C any](c *Client, resp *Response[C], use func() error) func([]byte) error {
	dec := decodeInto(resp)
	return func(b []byte) error {
		if err := dec(b); err != nil {
			return err
		}
		if err := c.checkVersion(resp.Model, resp.Metadata); err != nil {
			return err
		}
		return use()
	}
}

// tokenIDs reads the "token_id:<id>" tokens of return_tokens_as_token_ids
// (Config.TokenIDs) into comp.TokenIDs and each log-prob's TokenID; a
// server that ignored the field (plain token text) leaves them unset.
func (c *Client) tokenIDs(comp *backend.Completion, lps []backend.TokenLogProb) {
	if !c.cfg.TokenIDs || lps == nil {
		return
	}
	ids := make([]int, len(lps))
	for i := range lps {
		id, ok := ParseTokenIDString(lps[i].Token)
		if !ok {
			return
		}
		ids[i] = id
	}
	for i := range lps {
		lps[i].TokenID = ids[i]
	}
	comp.TokenIDs = ids
}

func (c *Client) chat(ctx context.Context, r *backend.GenerateRequest, n int, res *backend.GenerateResponse) error {
	msgs := make([]ChatMessage, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = ChatMessage{Role: m.Role, Content: m.Content}
	}
	sp, err := samplingParams(r, c.cfg.TokenIDs)
	if err != nil {
		return err
	}
	body := ChatRequest{Model: c.cfg.Model, Messages: msgs, N: &n, Stop: r.Stop, BadWords: r.BadWords, SamplingParams: sp}
	body.MaxTokens, body.Temperature, body.TopP, body.Seed = sampling(r)
	wantLP := r.LogProbs || r.TopLogProbs > 0
	if wantLP || n > 1 || c.cfg.TokenIDs {
		body.Logprobs = true
		if r.TopLogProbs > 0 {
			k := r.TopLogProbs
			body.TopLogprobs = &k
		}
	}
	var resp ChatResponse
	conv := func(ch ChatChoice) (backend.Completion, error) {
		comp := backend.Completion{Index: ch.Index, Text: ch.Message.Content, FinishReason: backend.FinishReason(ch.FinishReason), Tokens: -1}
		stopReason(&comp, ch.StopReason)
		var lps []backend.TokenLogProb
		if ch.Logprobs != nil {
			lps = make([]backend.TokenLogProb, len(ch.Logprobs.Content))
			for i, t := range ch.Logprobs.Content {
				lp, err := logprob(t.Logprob)
				if err != nil {
					return comp, fmt.Errorf("token %d: %w", i, err)
				}
				lps[i] = backend.TokenLogProb{Token: t.Token, TokenID: -1, LogProb: lp}
				if r.TopLogProbs > 0 {
					lps[i].Top = make([]backend.TopLogProb, len(t.TopLogprobs))
					for j, a := range t.TopLogprobs {
						if lps[i].Top[j].LogProb, err = logprob(a.Logprob); err != nil {
							return comp, fmt.Errorf("token %d alternative %q: %w", i, a.Token, err)
						}
						lps[i].Top[j].Token = a.Token
					}
				}
			}
		}
		c.tokenIDs(&comp, lps)
		return comp, keepLogprobs(&comp, lps, ch.Logprobs != nil, wantLP)
	}
	return c.call(ctx, r.ID, "/chat/completions", body, checked(c, &resp, func() error {
		if err := finish(res, &resp, n, conv); err != nil || !r.PromptLogProbs {
			return err
		}
		return promptLogprobs(res, resp.PromptLogprobs)
	}))
}

// logprobSlack is how far above 0 a log-prob may be and still be rounding:
// log p ≤ 0 for every probability, and a server that sends more is broken.
const logprobSlack = 1e-4

// logprob converts a wire log-prob (fromWireLogprob), refusing an
// impossible one: above 0 (beyond rounding, which is clamped to 0) or NaN.
func logprob(v float64) (float64, error) {
	if math.IsNaN(v) || v > logprobSlack {
		return 0, fmt.Errorf("impossible log-prob %v (a log-probability is at most 0)", v)
	}
	return min(fromWireLogprob(v), 0), nil
}

// keepLogprobs counts a choice's tokens from its log-probs (present: the
// choice has a log-prob block) and keeps them in comp when they were asked
// for (want); asked for but missing is an error.
func keepLogprobs(comp *backend.Completion, lps []backend.TokenLogProb, present, want bool) error {
	if !present {
		if want {
			return errors.New("log-probs asked for but missing")
		}
		return nil
	}
	comp.Tokens = len(lps)
	if want {
		comp.LogProbs = lps
	}
	return nil
}

// finish stores resp's model and prompt tokens in res and its choices,
// converted by conv and checked by collect, as res's completions. A
// malformed answer (wrong choices, log-probs asked for but missing or
// impossible) is a *malformedError: the attempt failed, and is retried.
func finish[C any](res *backend.GenerateResponse, resp *Response[C], n int, conv func(C) (backend.Completion, error)) error {
	if resp.Model != "" {
		res.Model = resp.Model
	}
	u := resp.Usage
	if u != nil {
		res.PromptTokens = u.PromptTokens
	}
	comps, err := collect(resp.Choices, n, conv)
	if err != nil {
		return &malformedError{err.Error()}
	}
	if n == 1 && u != nil && comps[0].Tokens < 0 {
		comps[0].Tokens = u.CompletionTokens
	}
	res.Completions = comps
	return nil
}

// collect converts choices and checks that their indices are exactly 0..n-1.
func collect[C any](choices []C, n int, conv func(C) (backend.Completion, error)) ([]backend.Completion, error) {
	if len(choices) != n {
		return nil, fmt.Errorf("%d choices, want %d", len(choices), n)
	}
	out := make([]backend.Completion, n)
	seen := make([]bool, n)
	for _, ch := range choices {
		comp, err := conv(ch)
		idx := comp.Index
		if err != nil {
			return nil, fmt.Errorf("choice %d: %w", idx, err)
		}
		if idx < 0 || idx >= n || seen[idx] {
			return nil, fmt.Errorf("choice index %d out of range or repeated (n = %d)", idx, n)
		}
		switch comp.FinishReason {
		case backend.FinishStop, backend.FinishLength, backend.FinishAbort:
		default:
			return nil, fmt.Errorf("choice %d: finish_reason %q", idx, comp.FinishReason)
		}
		seen[idx] = true
		out[idx] = comp
	}
	return out, nil
}

func fromCompletionLogprobs(lp *CompletionLogprobs) ([]backend.TokenLogProb, error) {
	if len(lp.TokenLogprobs) != len(lp.Tokens) {
		return nil, fmt.Errorf("%d tokens but %d token_logprobs", len(lp.Tokens), len(lp.TokenLogprobs))
	}
	if lp.TopLogprobs != nil && len(lp.TopLogprobs) != len(lp.Tokens) {
		return nil, fmt.Errorf("%d tokens but %d top_logprobs", len(lp.Tokens), len(lp.TopLogprobs))
	}
	out := make([]backend.TokenLogProb, len(lp.Tokens))
	for i, tok := range lp.Tokens {
		v := math.Inf(-1)
		if p := lp.TokenLogprobs[i]; p != nil {
			var err error
			if v, err = logprob(*p); err != nil {
				return nil, fmt.Errorf("token %d: %w", i, err)
			}
		}
		out[i] = backend.TokenLogProb{Token: tok, TokenID: -1, LogProb: v}
		if lp.TopLogprobs != nil && len(lp.TopLogprobs[i]) > 0 {
			var err error
			if out[i].Top, err = topFromMap(lp.TopLogprobs[i]); err != nil {
				return nil, fmt.Errorf("token %d: %w", i, err)
			}
		}
	}
	return out, nil
}

// topFromMap orders a legacy top_logprobs map, most likely first.
func topFromMap(m map[string]float64) ([]backend.TopLogProb, error) {
	top := make([]backend.TopLogProb, 0, len(m))
	for tok, v := range m {
		lp, err := logprob(v)
		if err != nil {
			return nil, fmt.Errorf("alternative %q: %w", tok, err)
		}
		top = append(top, backend.TopLogProb{Token: tok, LogProb: lp})
	}
	sort.Slice(top, func(a, b int) bool {
		if top[a].LogProb != top[b].LogProb {
			return top[a].LogProb > top[b].LogProb
		}
		return top[a].Token < top[b].Token
	})
	return top, nil
}
