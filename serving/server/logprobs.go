package server

import (
	"slices"
	"unicode/utf8"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// legacyLogprobs builds completions' log-prob block as vLLM does: per
// token its text (or "token_id:<id>" with asIDs), its log-prob, and a map
// of the token itself and the top most likely alternatives; text offsets
// count characters from offset. It appends to out (nil: a new block).
type legacyLogprobs struct {
	out    *openai.CompletionLogprobs
	top    int
	asIDs  bool
	offset int
	last   int // the previous token's length
}

func newLegacy(top int, asIDs bool, offset int) *legacyLogprobs {
	return &legacyLogprobs{top: top, asIDs: asIDs, offset: offset,
		out: &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}}
}

func (l *legacyLogprobs) next(tok string) {
	if len(l.out.TextOffset) == 0 {
		l.out.TextOffset = append(l.out.TextOffset, l.offset)
	} else {
		l.out.TextOffset = append(l.out.TextOffset, l.out.TextOffset[len(l.out.TextOffset)-1]+l.last)
	}
	l.last = utf8.RuneCountInString(tok)
	l.out.Tokens = append(l.out.Tokens, tok)
}

// first adds a token without a log-prob (an echoed prompt's first).
func (l *legacyLogprobs) first(tok string) {
	l.next(tok)
	l.out.TokenLogprobs = append(l.out.TokenLogprobs, nil)
	l.out.TopLogprobs = append(l.out.TopLogprobs, nil)
}

// sampled adds a generated token.
func (l *legacyLogprobs) sampled(t backend.TokenLogProb) {
	tok := tokenString(t, l.asIDs)
	l.next(tok)
	v := openai.WireLogprob(t.LogProb)
	l.out.TokenLogprobs = append(l.out.TokenLogprobs, &v)
	m := map[string]float64{tok: v}
	for _, a := range t.Top[:min(l.top, len(t.Top))] {
		if _, ok := m[a.Token]; !ok { // two ids may decode alike: keep the first, as vLLM's dict does
			m[a.Token] = openai.WireLogprob(a.LogProb)
		}
	}
	l.out.TopLogprobs = append(l.out.TopLogprobs, m)
}

// prompt adds an echoed prompt token after the first.
func (l *legacyLogprobs) prompt(p backend.PromptLogProb) {
	tok := p.Token
	if l.asIDs {
		tok = openai.TokenIDString(p.TokenID)
	}
	l.next(tok)
	v := openai.WireLogprob(p.LogProb)
	l.out.TokenLogprobs = append(l.out.TokenLogprobs, &v)
	m := map[string]float64{tok: v}
	for _, a := range p.Top[:min(l.top, len(p.Top))] {
		key := a.Token
		if l.asIDs {
			key = openai.TokenIDString(a.TokenID)
		}
		if _, ok := m[key]; !ok {
			m[key] = openai.WireLogprob(a.LogProb)
		}
	}
	l.out.TopLogprobs = append(l.out.TopLogprobs, m)
}

// tokenString is a sampled token on the wire: its text, or "token_id:<id>"
// under return_tokens_as_token_ids (its text when the engine gave no id).
func tokenString(t backend.TokenLogProb, asIDs bool) string {
	if asIDs && t.TokenID >= 0 {
		return openai.TokenIDString(t.TokenID)
	}
	return t.Token
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// chatLogprobs is the chat log-prob block of lps with top alternatives
// each.
func chatLogprobs(lps []backend.TokenLogProb, top int, asIDs bool) *openai.ChatLogprobs {
	out := &openai.ChatLogprobs{Content: []openai.TokenLogprob{}}
	for _, t := range lps {
		tl := openai.TokenLogprob{Token: tokenString(t, asIDs), Logprob: openai.WireLogprob(t.LogProb), Bytes: tokenBytes(t.Token), TopLogprobs: []openai.TopLogprob{}}
		for _, a := range t.Top[:min(top, len(t.Top))] {
			tl.TopLogprobs = append(tl.TopLogprobs, openai.TopLogprob{Token: a.Token, Logprob: openai.WireLogprob(a.LogProb), Bytes: tokenBytes(a.Token)})
		}
		out.Content = append(out.Content, tl)
	}
	return out
}

// vllmPromptLogprobs is vLLM's prompt_logprobs of a response: null for the
// first prompt token, then per token its own entry and its top
// alternatives (each token once).
func vllmPromptLogprobs(res *backend.GenerateResponse, top int) []openai.PromptLogprobs {
	out := make([]openai.PromptLogprobs, 0, len(res.PromptLogProbs)+1)
	out = append(out, nil)
	for _, p := range res.PromptLogProbs {
		m := openai.PromptLogprobs{{TokenID: p.TokenID, PromptLogprob: openai.PromptLogprob{Logprob: openai.WireLogprob(p.LogProb), Rank: p.Rank, DecodedToken: p.Token}}}
		for _, a := range p.Top[:min(top, len(p.Top))] {
			if a.TokenID == p.TokenID {
				continue
			}
			m = append(m, openai.PromptLogprobEntry{TokenID: a.TokenID, PromptLogprob: openai.PromptLogprob{Logprob: openai.WireLogprob(a.LogProb), Rank: a.Rank, DecodedToken: a.Token}})
		}
		out = append(out, m)
	}
	return out
}

// stopReason is vLLM's stop_reason of a completion: its stop string, or its
// stop token when the request named it in stop_token_ids (not the model's
// end token), else nil.
func stopReason(c backend.Completion, stopIDs []int) any {
	switch {
	case c.StopString != "":
		return c.StopString
	case c.StopTokenID != nil && slices.Contains(stopIDs, *c.StopTokenID):
		return *c.StopTokenID
	}
	return nil
}

func tokenCount(c backend.Completion) int {
	switch {
	case c.Tokens >= 0:
		return c.Tokens
	case c.TokenIDs != nil:
		return len(c.TokenIDs)
	default:
		return len(c.LogProbs)
	}
}
