package openai

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/evolm/evolm/serving/backend"
)

// A 200 answer without the log-probs the request asked for, or with an
// impossible (positive) log-prob, is a failed attempt: it is retried, never
// stored as a row's missing or shifted score.
func TestUnusableAnswersAreRetried(t *testing.T) {
	gen := backend.GenerateRequest{ID: "g", Prompt: "Q", Sampling: backend.Sampling{MaxTokens: 1}, LogProbs: true, TopLogProbs: 2}
	chat := backend.GenerateRequest{ID: "c", Messages: []backend.Message{{Role: "user", Content: "Q"}}, Sampling: backend.Sampling{MaxTokens: 1}, LogProbs: true}
	score := backend.ScoreRequest{ID: "s", Prefix: "Q ", Suffixes: []string{"c?"}, Candidates: []string{" yes", " no"}}
	for _, f := range []fault{noLogprobs, positiveLogprob} {
		for _, api := range []ScoreAPI{ScoreExtension, ScoreCompletions} {
			srv := newFaultServer(map[string][]fault{"g": {f}, "c": {f}, "s": {f}, "s#0": {f}})
			ts := httptest.NewServer(srv)
			log := &logRecorder{}
			client := testClient(t, []string{ts.URL}, log, func(c *Config) { c.ScoreAPI = api })
			res, err := client.Generate(context.Background(), []backend.GenerateRequest{gen})
			if err != nil {
				t.Fatal(err)
			}
			if r := res[0]; r.Failure != nil || len(r.Completions[0].LogProbs) != 1 || r.Completions[0].LogProbs[0].LogProb != -0.25 {
				t.Errorf("fault %d: completion %+v, want the retried answer's log-prob -0.25", f, r)
			}
			sc, err := client.Score(context.Background(), []backend.ScoreRequest{score})
			if err != nil {
				t.Fatal(err)
			}
			if r := sc[0]; r.Failure != nil || r.LogProbs[0][0] != -0.25 || r.LogProbs[0][1] != -1.5 {
				t.Errorf("fault %d, %s: score %+v, want the retried answer's [-0.25 -1.5]", f, api, r)
			}
			retried := log.retries()
			for _, id := range []string{"g", map[ScoreAPI]string{ScoreExtension: "s", ScoreCompletions: "s#0"}[api]} {
				if len(retried[id]) != 1 {
					t.Errorf("fault %d, %s: request %s retried %v, want once", f, api, id, retried[id])
				}
			}
			ts.Close()
		}
	}
	// A chat answer without its log-probs, every time: the call fails
	// naming why, after its attempts.
	srv := newFaultServer(map[string][]fault{"c": {noLogprobs, noLogprobs, noLogprobs}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := testClient(t, []string{ts.URL}, &logRecorder{}, func(c *Config) { c.MaxAttempts = 3 })
	_, err := client.Generate(context.Background(), []backend.GenerateRequest{chat})
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !strings.Contains(err.Error(), "log-probs asked for but missing") {
		t.Errorf("chat without log-probs on every attempt: %v, want an ExhaustedError naming the missing log-probs", err)
	}
}
