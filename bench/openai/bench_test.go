package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/server/servertest"
)

// latencyGenerator is the test double behind the local server: each call
// takes a fixed time, as a model would, and returns MaxTokens one-word
// tokens. It stands in for the torch engine until a benchmark can serve a
// real checkpoint.
type latencyGenerator struct{ delay time.Duration }

func (g latencyGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	select {
	case <-time.After(g.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = backend.GenerateResponse{ID: r.ID, PromptTokens: len(strings.Fields(r.Prompt))}
		for s := range r.Samples() {
			c := backend.Completion{Index: s, Text: strings.Repeat(" word", r.MaxTokens), FinishReason: backend.FinishLength, Tokens: r.MaxTokens}
			if r.LogProbs {
				for range r.MaxTokens {
					c.LogProbs = append(c.LogProbs, backend.TokenLogProb{Token: " word", TokenID: -1, LogProb: -0.5})
				}
			}
			out[i].Completions = append(out[i].Completions, c)
		}
	}
	return out, nil
}

func startLocal(tb testing.TB, delay time.Duration) string {
	tb.Helper()
	h, err := server.NewHandler(server.Config{Generator: latencyGenerator{delay}, Model: "local", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return "http://" + servertest.Start(tb, h, server.ServerOptions{Grace: 10 * time.Second}) + "/v1"
}

func TestRunPrintsTable(t *testing.T) {
	url := startLocal(t, 0)
	cfg, err := parseFlags([]string{"-endpoint", url, "-inflight", "1,4", "-requests", "12", "-max-tokens", "3", "-logprobs", "0"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	res, err := run(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].inFlight != 1 || res[1].inFlight != 4 {
		t.Fatalf("levels %+v, want 1 and 4", res)
	}
	for _, r := range res {
		if r.requests != 12 || r.tokens != 36 || r.rowFailure != 0 {
			t.Errorf("level %d: %d requests, %d tokens, %d failures; want 12, 36, 0", r.inFlight, r.requests, r.tokens, r.rowFailure)
		}
	}
	if out := buf.String(); !strings.Contains(out, "in_flight") || !strings.Contains(out, "model local") {
		t.Errorf("table:\n%s", out)
	}
	t.Logf("\n%s", buf.String())
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"-endpoint", "http://x", "-inflight", "1,0"}, {"-endpoint", "http://x", "-requests", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) = nil error", args)
		}
	}
}

// benchMeasure times measure with k requests in flight as the benchmark's
// body and reports its requests per second.
func benchMeasure(b *testing.B, cfg config, k int) result {
	b.Helper()
	b.ResetTimer()
	r, err := measure(context.Background(), cfg, k)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.reqPerSec, "req/s")
	return r
}

// BenchmarkThroughput runs the client against a local `evolm serve` handler
// as requests in flight scale from 1 to 64: with an instant generator (the
// client and HTTP overhead alone) and with a 5 ms generator (latency hidden
// by concurrency).
func BenchmarkThroughput(b *testing.B) {
	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		url := startLocal(b, delay)
		for _, k := range []int{1, 2, 4, 8, 16, 32, 64} {
			b.Run(fmt.Sprintf("gen=%v/inflight=%d", delay, k), func(b *testing.B) {
				cfg := config{endpoints: []string{url}, model: "local", inFlight: []int{k}, requests: b.N, maxTokens: 16,
					prompt: "Write one sentence about the sea.", logprobs: -1}
				r := benchMeasure(b, cfg, k)
				b.ReportMetric(ms(r.p50), "p50_ms")
			})
		}
	}
}
