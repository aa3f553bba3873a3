package openai

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/evolm/evolm/serving/backend"
)

// fuzzTransport is the test double of these fuzz tests: every request gets
// the same canned status and body, with no network.
type fuzzTransport struct {
	status int
	body   string
}

func (f fuzzTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: f.status, Body: io.NopCloser(strings.NewReader(f.body)),
		Header: http.Header{"Content-Type": {"application/json"}}, Request: r}, nil
}

// FuzzParseResponse feeds fuzzed server answers to the client's response
// parsers (completions, chat, the score extension and the completions
// fallback): no panic, and what the client accepts is well formed: one
// response per request, n completions indexed 0..n-1 with a known finish
// reason and log-probs when asked, a score row per suffix with a log-prob
// per candidate, none of them NaN or positive infinity; a failure message
// is valid UTF-8.
func FuzzParseResponse(f *testing.F) {
	f.Add(200, `{"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" a","finish_reason":"length","logprobs":{"tokens":[" a"],"token_logprobs":[-0.5],"top_logprobs":[{" a":-0.5," b":-1}],"text_offset":[0]}},{"index":1,"text":"","finish_reason":"stop","logprobs":{"tokens":[],"token_logprobs":[],"top_logprobs":[],"text_offset":[]}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, uint8(0))
	f.Add(200, `{"choices":[{"index":1,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":{"content":[{"token":"hi","logprob":-9999.0,"bytes":[104,105],"top_logprobs":[{"token":"hi","logprob":-0.1}]}]}},{"index":0,"message":{"content":""},"finish_reason":"length","logprobs":{"content":[]}}]}`, uint8(1))
	f.Add(200, `{"object":"evolm.score","model":"m","logprobs":[[-0.1,-2.3],[-9999,-0.5]]}`, uint8(2))
	f.Add(200, `{"choices":[{"index":0,"text":" yes","finish_reason":"length","logprobs":{"tokens":[" yes"],"token_logprobs":[null],"top_logprobs":[{" no":-1.5}]}}]}`, uint8(3))
	f.Add(400, `{"error":{"message":"prompt too long \u00e9\u00e9","type":"invalid_request_error","param":null,"code":null}}`, uint8(0))
	f.Add(404, strings.Repeat("é", 150), uint8(2))
	f.Add(422, "a"+strings.Repeat("é", 150), uint8(0)) // a 200-byte cut inside a character
	f.Add(200, `{"choices":[{"index":0,"text":"a","finish_reason":"length"}]} trailing`, uint8(0))
	f.Fuzz(func(t *testing.T, status int, body string, mode uint8) {
		if status < 200 || status > 599 || retryableStatus(status) {
			status = 200 // retries would only repeat the same answer
		}
		c, err := New(Config{Endpoints: []string{"http://fuzz.invalid/v1"}, Model: "m", MaxAttempts: 1,
			HTTPClient: &http.Client{Transport: fuzzTransport{status, body}}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if mode%4 >= 2 {
			c.cfg.ScoreAPI = ScoreExtension
			if mode%4 == 3 {
				c.cfg.ScoreAPI = ScoreCompletions
			}
			req := backend.ScoreRequest{ID: "s", Prefix: "q", Suffixes: []string{" a", " b"}, Candidates: []string{" yes", " no"}}
			res, err := c.Score(ctx, []backend.ScoreRequest{req})
			if err != nil {
				checkUTF8(t, body, err.Error())
				return
			}
			if len(res) != 1 || res[0].ID != "s" {
				t.Fatalf("%d responses (%+v) for one request", len(res), res)
			}
			if f := res[0].Failure; f != nil {
				checkUTF8(t, body, f.Message)
				return
			}
			if len(res[0].LogProbs) != len(req.Suffixes) {
				t.Fatalf("%d score rows for %d suffixes", len(res[0].LogProbs), len(req.Suffixes))
			}
			for _, row := range res[0].LogProbs {
				if len(row) != len(req.Candidates) {
					t.Fatalf("%d log-probs for %d candidates", len(row), len(req.Candidates))
				}
				for _, v := range row {
					checkLogprob(t, v)
				}
			}
			return
		}
		req := backend.GenerateRequest{ID: "g", Prompt: "p", N: 2, Sampling: backend.Sampling{MaxTokens: 4, Temperature: 1}, TopLogProbs: 2}
		if mode%4 == 1 {
			req.Prompt, req.Messages = "", []backend.Message{{Role: "user", Content: "p"}}
		}
		res, err := c.Generate(ctx, []backend.GenerateRequest{req})
		if err != nil {
			checkUTF8(t, body, err.Error())
			return
		}
		if len(res) != 1 || res[0].ID != "g" {
			t.Fatalf("%d responses (%+v) for one request", len(res), res)
		}
		if f := res[0].Failure; f != nil {
			checkUTF8(t, body, f.Message)
			return
		}
		if len(res[0].Completions) != req.N {
			t.Fatalf("%d completions, want %d", len(res[0].Completions), req.N)
		}
		for i, comp := range res[0].Completions {
			if comp.Index != i {
				t.Fatalf("completion %d has index %d", i, comp.Index)
			}
			if comp.FinishReason != backend.FinishStop && comp.FinishReason != backend.FinishLength {
				t.Fatalf("completion %d: finish reason %q", i, comp.FinishReason)
			}
			if comp.LogProbs == nil || comp.Tokens != len(comp.LogProbs) {
				t.Fatalf("completion %d: %d tokens, %d log-probs (asked for)", i, comp.Tokens, len(comp.LogProbs))
			}
			for _, lp := range comp.LogProbs {
				checkLogprob(t, lp.LogProb)
				for _, a := range lp.Top {
					checkLogprob(t, a.LogProb)
				}
			}
		}
	})
}

func checkLogprob(t *testing.T, v float64) {
	t.Helper()
	if math.IsNaN(v) || math.IsInf(v, 1) {
		t.Fatalf("log-prob %v accepted", v)
	}
}

// checkUTF8 fails when a message built from a valid UTF-8 body is not valid
// UTF-8 (a cut in the middle of a character).
func checkUTF8(t *testing.T, body, msg string) {
	t.Helper()
	if utf8.ValidString(body) && !utf8.ValidString(msg) {
		t.Fatalf("message %q is not valid UTF-8", msg)
	}
}
