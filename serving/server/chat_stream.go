package server

import (
	"net/http"
	"time"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// streamChat answers a chat request as a stream, in vLLM's shape: a first
// chunk per choice with the role, the echo when asked, a chunk per decode
// step that gave a choice new text or tokens, its last chunk with the
// finish reason, the usage chunk when asked, [DONE]. With tools the text
// is held back and the last chunk carries the content or the tool calls
// parsed out of it.
func (s *server) streamChat(w http.ResponseWriter, r *http.Request, p *chatCall, e *entry) error {
	promptTokens, err := s.promptCounts(e, []backend.GenerateRequest{p.req}, p.contUsage)
	if err != nil {
		return err
	}
	ev := startSSE(w)
	created := time.Now().Unix()
	sent := 0
	chunk := func(ch openai.ChatChunkChoice) error {
		c := openai.ChatChunk{ID: p.id, Object: "chat.completion.chunk", Created: created, Model: e.id,
			Choices: []openai.ChatChunkChoice{ch}}
		if p.contUsage {
			c.Usage = &openai.Usage{PromptTokens: sum(promptTokens), CompletionTokens: sent, TotalTokens: sum(promptTokens) + sent}
		}
		return ev.send(c)
	}
	text := func(s string) *string { return &s }
	for i := range p.n {
		if err := chunk(openai.ChatChunkChoice{Index: i, Delta: openai.ChatDelta{Role: p.role, Content: text("")}}); err != nil {
			return nil
		}
		if p.echo != "" {
			if err := chunk(openai.ChatChunkChoice{Index: i, Delta: openai.ChatDelta{Content: text(p.echo)}}); err != nil {
				return nil
			}
		}
	}
	logprobs := func(lps []backend.TokenLogProb) *openai.ChatLogprobs {
		if p.top < 0 {
			return nil
		}
		return chatLogprobs(lps, p.top, p.asIDs)
	}
	states := make([]streamed, p.n)
	hold := p.tools != toolNone
	resps, err := s.streamRun(r.Context(), e, []backend.GenerateRequest{p.req}, func(d delta) error {
		if hold || d.d.Text == "" && len(d.d.LogProbs) == 0 {
			return nil
		}
		st := &states[d.d.Index]
		ch := openai.ChatChunkChoice{Index: d.d.Index, Delta: openai.ChatDelta{Content: text(d.d.Text)}, Logprobs: logprobs(d.d.LogProbs)}
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
	res := resps[0]
	total := openai.Usage{PromptTokens: max(res.PromptTokens, 0)}
	for _, c := range res.Completions {
		st := &states[c.Index]
		rest, lps, err := st.rest(c)
		if err != nil {
			ev.fail(s.apiErr(r, err))
			return nil
		}
		sent += len(lps)
		reason := string(c.FinishReason)
		delta := openai.ChatDelta{Content: text(rest)}
		if hold {
			msg, why := p.message(backend.Completion{Text: c.Text, FinishReason: c.FinishReason})
			reason = why
			delta = openai.ChatDelta{Content: text(msg.Content[len(p.echo):])}
			for k := range msg.ToolCalls {
				k := k
				msg.ToolCalls[k].Index = &k
			}
			delta.ToolCalls = msg.ToolCalls
		}
		ch := openai.ChatChunkChoice{Index: c.Index, Delta: delta, Logprobs: logprobs(lps), FinishReason: &reason, StopReason: stopReason(c, p.stopIDs)}
		if err := chunk(ch); err != nil {
			return nil
		}
		total.CompletionTokens += tokenCount(c)
	}
	if p.usage {
		total.TotalTokens = total.PromptTokens + total.CompletionTokens
		if err := ev.send(openai.ChatChunk{ID: p.id, Object: "chat.completion.chunk", Created: created, Model: e.id,
			Choices: []openai.ChatChunkChoice{}, Usage: &total}); err != nil {
			return nil
		}
	}
	_ = ev.done()
	return nil
}
