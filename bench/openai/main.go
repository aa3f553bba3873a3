// Command openai-bench measures the `openai` backend's throughput against
// OpenAI-compatible endpoints (`evolm serve`, vLLM, SGLang, llama.cpp) as the
// number of requests in flight grows, and prints one table row per level:
//
//	go run ./bench/openai -endpoint http://127.0.0.1:8000/v1 -model NAME -inflight 1,2,4,8,16,32,64
//
// At each level it runs that many workers, each sending one request at a
// time through one client whose in-flight cap equals the level, and reports
// requests/s, completion tokens/s, latency percentiles and the speed-up over
// the first level.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

type config struct {
	endpoints []string
	model     string
	inFlight  []int
	requests  int // per level
	maxTokens int
	prompt    string
	chat      bool
	logprobs  int // top log-probs per token; -1 for none
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("openai-bench", flag.ContinueOnError)
	var cfg config
	var eps stringList
	var levels string
	fs.Var(&eps, "endpoint", "base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (repeatable)")
	fs.StringVar(&cfg.model, "model", "", "model name (default: the first one the endpoint lists)")
	fs.StringVar(&levels, "inflight", "1,2,4,8,16,32,64", "comma-separated requests-in-flight levels")
	fs.IntVar(&cfg.requests, "requests", 256, "requests per level")
	fs.IntVar(&cfg.maxTokens, "max-tokens", 16, "max_tokens per request")
	fs.StringVar(&cfg.prompt, "prompt", "Write one sentence about the sea.", "prompt text")
	fs.BoolVar(&cfg.chat, "chat", false, "use /v1/chat/completions instead of /v1/completions")
	fs.IntVar(&cfg.logprobs, "logprobs", -1, "ask for this many top log-probs per token (-1: none)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.endpoints = eps
	if len(cfg.endpoints) == 0 {
		return cfg, errors.New("at least one -endpoint is required")
	}
	for _, f := range strings.Split(levels, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return cfg, fmt.Errorf("-inflight %q: want positive integers", levels)
		}
		cfg.inFlight = append(cfg.inFlight, k)
	}
	if cfg.requests < 1 || cfg.maxTokens < 1 {
		return cfg, errors.New("-requests and -max-tokens must be positive")
	}
	return cfg, nil
}

// result is one level's measurement.
type result struct {
	inFlight   int
	requests   int
	elapsed    time.Duration
	tokens     int // completion tokens, where the server reports them
	p50, p95   time.Duration
	reqPerSec  float64
	tokPerSec  float64
	speedup    float64
	rowFailure int
}

// measure sends cfg.requests requests through a client capped at inFlight,
// from inFlight workers.
func measure(ctx context.Context, cfg config, inFlight int) (result, error) {
	client, err := openai.New(openai.Config{Endpoints: cfg.endpoints, Model: cfg.model, MaxInFlight: inFlight,
		MaxAttempts: 3, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return result{}, err
	}
	defer client.Close()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		tokens    int
		failures  int
		firstErr  error
		next      int
	)
	work := func() {
		for {
			mu.Lock()
			i := next
			next++
			mu.Unlock()
			if i >= cfg.requests || ctx.Err() != nil {
				return
			}
			req := backend.GenerateRequest{ID: fmt.Sprintf("bench-%d-%d", inFlight, i),
				Sampling: backend.Sampling{MaxTokens: cfg.maxTokens, Temperature: 1}}
			if cfg.chat {
				req.Messages = []backend.Message{{Role: "user", Content: cfg.prompt}}
			} else {
				req.Prompt = cfg.prompt
			}
			if cfg.logprobs >= 0 {
				req.LogProbs, req.TopLogProbs = true, cfg.logprobs
			}
			start := time.Now()
			resps, err := client.Generate(ctx, []backend.GenerateRequest{req})
			lat := time.Since(start)
			mu.Lock()
			switch {
			case err != nil && ctx.Err() != nil:
				if firstErr == nil {
					firstErr = err
				}
			case err != nil:
				// Retries exhausted: count it and go on, so the table
				// shows failures instead of hiding the level.
				failures++
				if failures == 1 {
					fmt.Fprintf(os.Stderr, "openai-bench: in flight %d: %v\n", inFlight, err)
				}
			case resps[0].Failure != nil:
				failures++
			default:
				latencies = append(latencies, lat)
				for _, c := range resps[0].Completions {
					tokens += max(c.Tokens, 0)
				}
			}
			mu.Unlock()
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(work)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, fmt.Errorf("in flight %d: %w", inFlight, firstErr)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	return result{inFlight: inFlight, requests: len(latencies), elapsed: elapsed, tokens: tokens,
		p50: pct(0.5), p95: pct(0.95), reqPerSec: float64(len(latencies)) / elapsed.Seconds(),
		tokPerSec: float64(tokens) / elapsed.Seconds(), rowFailure: failures}, nil
}

// run measures every level and prints the table.
func run(ctx context.Context, cfg config, w io.Writer) ([]result, error) {
	if cfg.model == "" {
		c, err := openai.New(openai.Config{Endpoints: cfg.endpoints, Model: "?"})
		if err != nil {
			return nil, err
		}
		ids, err := c.Models(ctx)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("%s lists no models; pass -model", cfg.endpoints[0])
		}
		cfg.model = ids[0]
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "in_flight\trequests\tfailed\tseconds\treq/s\tcompl_tok/s\tp50_ms\tp95_ms\tspeedup\t\n")
	var out []result
	for _, k := range cfg.inFlight {
		r, err := measure(ctx, cfg, k)
		if err != nil {
			return out, err
		}
		if len(out) > 0 && out[0].reqPerSec > 0 {
			r.speedup = r.reqPerSec / out[0].reqPerSec
		} else {
			r.speedup = 1
		}
		out = append(out, r)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2fx\t\n", r.inFlight, r.requests, r.rowFailure,
			r.elapsed.Seconds(), r.reqPerSec, r.tokPerSec, ms(r.p50), ms(r.p95), r.speedup)
	}
	fmt.Fprintf(tw, "\nmodel %s, %d endpoint(s), max_tokens %d, %s\t\n", cfg.model, len(cfg.endpoints), cfg.maxTokens,
		map[bool]string{true: "chat", false: "completions"}[cfg.chat])
	return out, tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "openai-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openai-bench:", err)
		os.Exit(1)
	}
}
