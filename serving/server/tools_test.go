package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
)

// textGenerator is a test double that answers every sample with text, in
// one stream delta of its tokens, and records the last request.
type textGenerator struct {
	text string
	last backend.GenerateRequest
}

func (g *textGenerator) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		g.last = r
		out[i] = backend.GenerateResponse{ID: r.ID, PromptTokens: 3, PromptTokenIDs: []int{1, 2, 3}, PromptText: r.Prompt}
		for s := range r.Samples() {
			lps := []backend.TokenLogProb{{Token: g.text, TokenID: 9, LogProb: -0.5}}
			if r.Stream != nil {
				r.Stream(backend.StreamDelta{Index: s, Text: g.text[:len(g.text)/2], LogProbs: lps})
			}
			out[i].Completions = append(out[i].Completions, backend.Completion{Index: s, Text: g.text, Tokens: 1,
				FinishReason: backend.FinishStop, LogProbs: lps})
		}
	}
	return out, nil
}

func TestToolCalls(t *testing.T) {
	g := &textGenerator{text: "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"}
	h, err := server.NewHandler(server.Config{Generator: g, Model: modelID, RenderChat: renderTestChat, MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url := startHandler(t, h)
	tools := `"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`
	msgs := `"messages": [{"role": "user", "content": "Weather?"}]`
	calls := func(m openai.ChatMessage) []openai.FunctionCall {
		var out []openai.FunctionCall
		for _, c := range m.ToolCalls {
			if c.Type != "function" || !strings.HasPrefix(c.ID, "chatcmpl-tool-") {
				t.Errorf("tool call %+v", c)
			}
			out = append(out, c.Function)
		}
		return out
	}
	both := []openai.FunctionCall{{Name: "get_weather", Arguments: `{"city": "Oslo"}`}, {Name: "get_weather", Arguments: `{"city": "Rome"}`}}

	status, body, _ := post2(t, url+"/chat/completions", "{"+msgs+", "+tools+"}")
	var cr openai.ChatResponse
	if status != http.StatusOK || json.Unmarshal([]byte(body), &cr) != nil {
		t.Fatalf("auto: %d %s", status, body)
	}
	if ch := cr.Choices[0]; ch.FinishReason != "tool_calls" || ch.Message.Content != "Checking." || !cmp.Equal(calls(ch.Message), both) {
		t.Errorf("auto: %+v", ch)
	}
	_, body, _ = post2(t, url+"/chat/completions", "{"+msgs+", "+tools+`, "parallel_tool_calls": false}`)
	_ = json.Unmarshal([]byte(body), &cr)
	if got := calls(cr.Choices[0].Message); !cmp.Equal(got, both[:1]) {
		t.Errorf("parallel_tool_calls false: %+v", got)
	}
	_, body, _ = post2(t, url+"/chat/completions", "{"+msgs+", "+tools+`, "tool_choice": "none"}`)
	_ = json.Unmarshal([]byte(body), &cr)
	if ch := cr.Choices[0]; ch.FinishReason != "stop" || ch.Message.Content != g.text || len(ch.Message.ToolCalls) != 0 {
		t.Errorf("tool_choice none: %+v", ch)
	}

	// Named: the output is the function's arguments, constrained to its
	// parameters' schema.
	g.text = `{"city": "Lima"}`
	_, body, _ = post2(t, url+"/chat/completions", "{"+msgs+", "+tools+`, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}`)
	_ = json.Unmarshal([]byte(body), &cr)
	if got := calls(cr.Choices[0].Message); !cmp.Equal(got, []openai.FunctionCall{{Name: "get_weather", Arguments: g.text}}) ||
		g.last.Format == nil || g.last.Format.Type != backend.FormatJSONSchema || !strings.Contains(string(g.last.Format.Schema), `"city"`) {
		t.Errorf("named: %+v, format %+v", got, g.last.Format)
	}
	for _, tc := range []struct{ body, param, msg string }{
		{"{" + msgs + ", " + tools + `, "tool_choice": "required"}`, "tool_choice", "required is not supported"},
		{"{" + msgs + `, "tool_choice": "auto"}`, "tool_choice", "needs tools"},
		{"{" + msgs + ", " + tools + `, "tool_choice": {"type": "function", "function": {"name": "nope"}}}`, "tool_choice", "not among the tools"},
		{`{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]}`,
			"messages[0].tool_calls[0].function.arguments", "not JSON"},
	} {
		if status, body, param := post2(t, url+"/chat/completions", tc.body); status != http.StatusBadRequest || param != tc.param || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d %q %s", tc.body, status, param, body)
		}
	}

	// Streaming with tools: the text is held back and the last chunk
	// carries the calls.
	g.text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
	_, body, _ = post2(t, url+"/chat/completions", "{"+msgs+", "+tools+`, "stream": true}`)
	var chunks []openai.ChatChunk
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		data := strings.TrimPrefix(ev, "data: ")
		if data == "[DONE]" {
			continue
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	last := chunks[len(chunks)-1].Choices[0]
	if len(chunks) != 2 || chunks[0].Choices[0].Delta.Role != "assistant" || last.FinishReason == nil || *last.FinishReason != "tool_calls" ||
		len(last.Delta.ToolCalls) != 1 || last.Delta.ToolCalls[0].Index == nil || last.Delta.ToolCalls[0].Function.Arguments != `{"city": "Oslo"}` {
		t.Errorf("streamed tool call: %s", body)
	}
}

// TestEchoLogprobs: echo with logprobs puts the prompt's tokens first, the
// first with a null log-prob, as vLLM (and lm-eval's parser) expect; the
// text is prompt + completion, and max_tokens 0 is allowed with echo.
func TestEchoLogprobs(t *testing.T) {
	g := &recordingGenerator{}
	h, err := server.NewHandler(server.Config{Generator: g, Model: modelID, MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url := startHandler(t, h)
	status, body, _ := post2(t, url+"/completions", `{"prompt": [5, 6], "echo": true, "logprobs": 1, "max_tokens": 1}`)
	var cr openai.CompletionResponse
	if status != http.StatusOK || json.Unmarshal([]byte(body), &cr) != nil {
		t.Fatalf("%d %s", status, body)
	}
	lp := cr.Choices[0].Logprobs
	if len(lp.Tokens) != 3 || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil || *lp.TokenLogprobs[1] != -1 || *lp.TokenLogprobs[2] != -0.5 ||
		!g.last.PromptLogProbs || g.last.PromptTopLogProbs != 1 {
		t.Errorf("echo logprobs: %s", body)
	}
	if status, body, _ := post2(t, url+"/completions", `{"prompt": "a b", "echo": true, "max_tokens": 0}`); status != http.StatusOK || !strings.Contains(body, `"text":"a b"`) {
		t.Errorf("echo with max_tokens 0: %d %s", status, body)
	}
}
