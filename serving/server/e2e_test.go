//go:build e2e

package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

// TestTorchEngineThroughServer serves a tiny random Qwen3 checkpoint with the
// torch backend and checks that the `openai` backend, talking to it over
// HTTP, gets exactly what the engine gives in process: the same completions,
// token counts, log-probs and top log-probs for completions and chat, and the
// same yes/no candidate log-probs from Score.
func TestTorchEngineThroughServer(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 3)
	m, err := torchbe.Load(torchbe.Options{Dir: dir, ModelID: "tiny-e2e", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	h, err := server.NewHandler(server.Config{Generator: m, Model: m.ID(), RenderChat: m.RenderChat, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url := startHandler(t, h)
	client := newClientModel(t, url, m.ID())

	t.Run("official python client", func(t *testing.T) {
		var got struct {
			Errors []string `json:"errors"`
		}
		out := testutil.RunPython(t, "openai_client_check.py", url, m.ID(), "engine")
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("script output %q: %v", out, err)
		}
		if diff := cmp.Diff([]string{"BadRequestError:400:max_tokens", "NotFoundError:404:model"}, got.Errors); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
	ctx := context.Background()

	sp := backend.Sampling{MaxTokens: 6, Temperature: 1, Seed: seed(5)}
	msgs := []backend.Message{{Role: "user", Content: "Name a colour."}}
	for _, tt := range []struct {
		name string
		req  backend.GenerateRequest
	}{
		{"completion n=2 sampled log-probs", backend.GenerateRequest{ID: "c", Prompt: "The sea is", N: 2, Sampling: sp, LogProbs: true}},
		{"chat n=2 top-3", backend.GenerateRequest{ID: "h", Messages: msgs, N: 2, Sampling: sp, LogProbs: true, TopLogProbs: 3}},
		{"greedy with stop", backend.GenerateRequest{ID: "g", Prompt: "Once upon a time", Sampling: backend.Sampling{MaxTokens: 5, Stop: []string{"."}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Generate(ctx, []backend.GenerateRequest{tt.req})
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.Generate(ctx, []backend.GenerateRequest{tt.req})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range got[0].Completions {
				if c.Tokens <= 0 || c.Text == "" {
					t.Errorf("completion %d is empty: %+v", c.Index, c)
				}
			}
			t.Logf("%q", got[0].Completions[0].Text)
			w := wireView(want)
			w[0].Model = m.ID()
			// Log-probs within 1e-5: a top-log-probs pass runs the samples
			// of a request again as one padded batch, and a run has seen
			// the last digits of one float32 differ (−11.0908260 against
			// −11.0908279). Tokens and texts must match exactly.
			if diff := cmp.Diff(w, got, cmpopts.EquateApprox(0, 1e-5)); diff != "" {
				t.Errorf("through the server vs in process (-want +got):\n%s", diff)
			}
		})
	}

	// Score: the candidates are " yes", " no" and the engine's own top next
	// tokens after the first suffix. Through the /v1/evolm/score extension
	// every value equals the engine's; through top log-probs (the path any
	// OpenAI server takes) the top tokens must, and the rest read -Inf.
	req := backend.ScoreRequest{ID: "s", Prefix: "Question: what is 2+2?\nResponse: 4\n\n",
		Suffixes: []string{"Criterion: says 4\nAnswer:", "Criterion: is polite\nAnswer:"}, Candidates: []string{" yes", " no"}}
	top, err := m.Generate(ctx, []backend.GenerateRequest{{ID: "t", Prompt: req.Prefix + req.Suffixes[0],
		Sampling: backend.Sampling{MaxTokens: 1}, TopLogProbs: 5}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{" yes": true, " no": true}
	var topCands []string
	for _, a := range top[0].Completions[0].LogProbs[0].Top {
		if !seen[a.Token] && len(m.Tokenizer().Encode(a.Token)) == 1 {
			seen[a.Token] = true
			req.Candidates = append(req.Candidates, a.Token)
			topCands = append(topCands, a.Token)
		}
	}
	if len(topCands) < 2 {
		t.Fatalf("only %d single-token candidates among the top 5", len(topCands))
	}
	want, err := m.Score(ctx, []backend.ScoreRequest{req})
	if err != nil {
		t.Fatal(err)
	}
	if want[0].Failure != nil {
		t.Fatal(want[0].Failure)
	}
	for _, api := range []openai.ScoreAPI{openai.ScoreAuto, openai.ScoreCompletions} {
		c, err := openai.New(openai.Config{Endpoints: []string{url}, Model: m.ID(), ScoreAPI: api, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Score(ctx, []backend.ScoreRequest{req})
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Failure != nil {
			t.Fatalf("%s: %v", api, got[0].Failure)
		}
		for k := range req.Suffixes {
			for j, cand := range req.Candidates {
				g, w := got[0].LogProbs[k][j], want[0].LogProbs[k][j]
				inTop := k == 0 && j >= 2
				switch {
				case api == openai.ScoreCompletions && math.IsInf(g, -1) && !inTop:
					// outside the server's top-20: not reported
				case math.Abs(g-w) > 1e-4 || math.IsInf(g, 0):
					t.Errorf("%s: suffix %d candidate %q: through the server %v, in process %v", api, k, cand, g, w)
				}
			}
		}
	}
}
