package server_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
)

// FuzzDecodeRequest posts fuzzed bodies to every POST route of the handler
// (over the fake generator, no network): no panic, never a 5xx, every answer
// is JSON, an error carries a message, and a completion answer holds
// len(prompt)·n choices.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(uint8(0), `{"model":"evolm-test-model","prompt":"hi","max_tokens":3,"n":2,"logprobs":2,"stop":["x1"]}`)
	f.Add(uint8(0), `{"prompt":["a","b"],"max_tokens":1,"temperature":0,"top_p":0.5,"top_k":-1,"seed":-9}`)
	f.Add(uint8(1), `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2,"logprobs":true,"top_logprobs":3}`)
	f.Add(uint8(1), `{"messages":[{"role":"tool","content":"x"}]}`)
	f.Add(uint8(2), `{"prefix":"q","suffixes":[" a"],"candidates":[" yes"," no"]}`)
	f.Add(uint8(0), `{"prompt":"a","max_tokens":1e9}`)
	f.Add(uint8(0), `{"prompt":"a","n":1,"n":2} {}`)
	f.Add(uint8(0), `{"prompt":[1,2,3]}`)
	f.Add(uint8(1), `{"messages":[{"role":"user","content":"a"}],"temperature":1e400}`)
	gen := &scoringGenerator{}
	h, err := server.NewHandler(server.Config{Generator: gen, Model: modelID, RenderChat: renderTestChat,
		Logger: slog.New(slog.DiscardHandler), MaxBodyBytes: 1 << 16, MaxN: 8, DefaultMaxTokens: 4, ChatMaxTokens: 4})
	if err != nil {
		f.Fatal(err)
	}
	paths := []string{"/v1/completions", "/v1/chat/completions", "/v1/evolm/score"}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		// Keep fuzzed requests cheap: the fake generator writes max_tokens tokens.
		var probe struct {
			MaxTokens  *float64 `json:"max_tokens"`
			MaxCTokens *float64 `json:"max_completion_tokens"`
		}
		if json.Unmarshal([]byte(body), &probe) == nil &&
			(probe.MaxTokens != nil && *probe.MaxTokens > 64 || probe.MaxCTokens != nil && *probe.MaxCTokens > 64) {
			return
		}
		path := paths[int(route)%len(paths)]
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			// A stream: every event is JSON, and the last is [DONE].
			events := strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n")
			for i, ev := range events {
				data, ok := strings.CutPrefix(ev, "data: ")
				if !ok || (i == len(events)-1) != (data == "[DONE]") || data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Fatalf("POST %s %q: stream event %d: %q", path, body, i, ev)
				}
			}
			return
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("POST %s %q: status %d, answer is not JSON: %q", path, body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			var eb openai.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Message == "" {
				t.Fatalf("POST %s %q: status %d without an error message: %s", path, body, rec.Code, rec.Body)
			}
			return
		}
		if path != "/v1/completions" {
			return
		}
		var creq openai.CompletionRequest
		if err := json.Unmarshal([]byte(body), &creq); err != nil {
			t.Fatalf("accepted a body that does not decode: %v", err)
		}
		var resp openai.CompletionResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		n := 1
		if creq.N != nil {
			n = *creq.N
		}
		if len(resp.Choices) != creq.Prompt.Len()*n {
			t.Fatalf("%d choices for %d prompts × n %d", len(resp.Choices), creq.Prompt.Len(), n)
		}
	})
}
