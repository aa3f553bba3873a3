package server

import (
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// streamCompletion answers a completion request as a stream: a chunk per
// decode step that gave a choice new text or tokens, the choice's last
// chunk with its finish reason, the usage chunk when asked, [DONE].
func (s *server) streamCompletion(w http.ResponseWriter, r *http.Request, p *completion, e *entry) error {
	promptTokens, err := s.promptCounts(e, p.reqs, p.contUsage)
	if err != nil {
		return err
	}
	ev := startSSE(w)
	created := time.Now().Unix()
	states := make([]streamed, len(p.reqs)*p.n)
	usage := func(completion int) *openai.Usage {
		if !p.contUsage {
			return nil
		}
		u := &openai.Usage{PromptTokens: sum(promptTokens), CompletionTokens: completion}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		return u
	}
	sent := 0 // completion tokens streamed, for continuous usage
	chunk := func(ch openai.CompletionChunkChoice) error {
		return ev.send(openai.CompletionChunk{ID: p.id, Object: "text_completion", Created: created, Model: e.id,
			Choices: []openai.CompletionChunkChoice{ch}, Usage: usage(sent)})
	}
	echoed := make([]bool, len(states))
	echo := func(req, idx int) string {
		if !p.echo || echoed[idx] {
			return ""
		}
		echoed[idx] = true
		return s.promptText(e, &backend.GenerateResponse{PromptTokenIDs: p.reqs[req].PromptTokenIDs}, p.texts[req])
	}
	logprobs := func(st *streamed, lps []backend.TokenLogProb) *openai.CompletionLogprobs {
		if p.top < 0 {
			return nil
		}
		l := newLegacy(p.top, p.asIDs, utf8.RuneCountInString(st.text.String()))
		for _, t := range lps {
			l.sampled(t)
		}
		return l.out
	}
	resps, err := s.streamRun(r.Context(), e, p.reqs, func(d delta) error {
		idx := d.req*p.n + d.d.Index
		st := &states[idx]
		text := echo(d.req, idx) + d.d.Text
		if text == "" && len(d.d.LogProbs) == 0 {
			return nil
		}
		ch := openai.CompletionChunkChoice{Index: idx, Text: text, Logprobs: logprobs(st, d.d.LogProbs)}
		st.add(d.d.Text, d.d.LogProbs, p.asIDs)
		sent += len(d.d.LogProbs)
		return chunk(ch)
	})
	if err != nil {
		if r.Context().Err() == nil {
			ev.fail(s.apiErr(r, err))
		}
		return nil
	}
	total := openai.Usage{}
	for i := range resps {
		res := &resps[i]
		total.PromptTokens += max(res.PromptTokens, 0)
		for _, c := range res.Completions {
			idx := i*p.n + c.Index
			st := &states[idx]
			text, lps, err := st.rest(c)
			if err != nil {
				ev.fail(s.apiErr(r, err))
				return nil
			}
			reason := string(c.FinishReason)
			sent += len(lps)
			ch := openai.CompletionChunkChoice{Index: idx, Text: echo(i, idx) + text, Logprobs: logprobs(st, lps),
				FinishReason: &reason, StopReason: stopReason(c, p.stopIDs)}
			st.add(text, lps, p.asIDs)
			if err := chunk(ch); err != nil {
				return nil
			}
			total.CompletionTokens += tokenCount(c)
		}
	}
	if p.usage {
		total.TotalTokens = total.PromptTokens + total.CompletionTokens
		if err := ev.send(openai.CompletionChunk{ID: p.id, Object: "text_completion", Created: created, Model: e.id,
			Choices: []openai.CompletionChunkChoice{}, Usage: &total}); err != nil {
			return nil
		}
	}
	_ = ev.done()
	return nil
}

// promptCounts are the prompts' token counts, which continuous usage
// statistics need before the engine answers: nil unless want.
func (s *server) promptCounts(e *entry, reqs []backend.GenerateRequest, want bool) ([]int, error) {
	if !want {
		return nil, nil
	}
	tk := e.eng.Tokenizer
	if tk == nil {
		return nil, badRequest("stream_options.continuous_usage_stats", "continuous usage statistics need the served model's tokenizer, and this server has none")
	}
	out := make([]int, len(reqs))
	for i, q := range reqs {
		n := len(q.PromptTokenIDs)
		if n == 0 {
			n = len(tk.Tokenize(q.Prompt))
		}
		if k := q.TruncatePromptTokens; k > 0 {
			n = min(n, k)
		}
		out[i] = n
	}
	return out, nil
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
