package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model/openai"
	"github.com/evolm/evolm/model/serve"
	"github.com/evolm/evolm/model/torchbe"
)

// newServeCmd is `evolm serve`: the torch engine behind an OpenAI-compatible
// HTTP server (package model/serve), loaded like the stages load it
// (model/torchbe).
func newServeCmd() *cobra.Command {
	var (
		o        torchbe.Options
		addr     string
		topLP    int
		maxBatch int
		runners  int
		budget   string
		apiKey   string
		maxBody  string
		bodyTO   time.Duration
		hdrTO    time.Duration
		idleTO   time.Duration
		grace    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --model DIR [--addr 127.0.0.1:8000]",
		Short: "Serve a checkpoint over an OpenAI-compatible HTTP API (completions, chat, log-probs, models)",
		Long: `Loads an HF checkpoint with the in-process torch engine and serves
/v1/models, /v1/completions and /v1/chat/completions (n, seed, stop, logprobs)
on --addr until interrupted, so that the openai backend of the stages, or any
OpenAI client, can use it. Chats are rendered with the checkpoint's Qwen3 chat
template; seeds follow the torch backend (sample j of seed s uses s+j).

Concurrent requests share the engine step by step, so a large request does
not starve a small one. A request over --max-model-len or the --memory-budget
is answered 400 before any work; an engine failure (out of memory) fails that
request with 503 and the server goes on. With --api-key (or EVOLM_API_KEY)
every /v1 route needs "Authorization: Bearer <key>", as vLLM's --api-key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.MemoryBudget, err = parseBytes(budget); err != nil {
				return fmt.Errorf("--memory-budget: %w", err)
			}
			bodyMax, err := parseBytes(maxBody)
			if err != nil || bodyMax <= 0 {
				return fmt.Errorf("--max-body %q: want a positive size such as 32MiB", maxBody)
			}
			if apiKey == "" {
				apiKey = os.Getenv(openai.APIKeyEnv)
			}
			m, err := torchbe.Load(o)
			if err != nil {
				return err
			}
			defer m.Close()
			h, err := serve.NewHandler(serve.Config{Generator: m, Model: m.ID(), RenderChat: m.RenderChat,
				MaxTopLogprobs: topLP, MaxBatch: maxBatch, BatchRunners: runners, MaxBodyBytes: bodyMax,
				BodyTimeout: bodyTO, APIKey: apiKey})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			if apiKey == "" && !loopback(ln.Addr()) {
				slog.Warn("serving on a non-loopback address without an API key: anyone who can reach it can use the model; set --api-key or EVOLM_API_KEY",
					"addr", ln.Addr().String())
			}
			slog.Info("serving", "model", m.ID(), "addr", "http://"+ln.Addr().String()+"/v1", "auth", apiKey != "")
			return serve.ServeWith(cmd.Context(), ln, h, serve.ServerOptions{Grace: grace, ReadHeaderTimeout: hdrTO, IdleTimeout: idleTO})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "model", "", "checkpoint directory (config.json, safetensors, tokenizer.json)")
	f.StringVar(&o.ModelID, "model-id", "", "model id served at /v1/models (default: the directory's base name)")
	f.StringVar(&o.Device, "device", "cpu", "cpu, cuda or cuda:N")
	f.StringVar(&o.DType, "dtype", "", "parameter dtype (default: float32 on CPU, bfloat16 on CUDA)")
	f.IntVar(&o.Threads, "threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	f.IntVar(&o.MaxBatch, "max-batch", 64, "most sequences the engine decodes together")
	f.IntVar(&o.MaxModelLen, "max-model-len", 0, "most tokens per sequence, prompt + max_tokens (0: the checkpoint's max_position_embeddings)")
	f.StringVar(&budget, "memory-budget", "0", "most engine memory that concurrent requests may hold (KV caches, prefill, logits), e.g. 6GiB; a request over it alone gets 400 (0: none)")
	f.IntVar(&o.PrefillChunk, "prefill-chunk", 512, "most prompt tokens per prefill pass")
	f.BoolVar(&o.DisableThinking, "disable-thinking", false, "render chats with enable_thinking=False")
	f.StringVar(&addr, "addr", "127.0.0.1:8000", "listen address (port 0 picks a free one); a non-loopback address without an API key is warned about")
	f.StringVar(&apiKey, "api-key", "", "require this bearer token on /v1 routes (default: $EVOLM_API_KEY)")
	f.IntVar(&topLP, "max-top-logprobs", 20, "most top log-probs per position a request may ask for")
	f.IntVar(&maxBatch, "coalesce", 64, "most concurrent requests the server merges into one engine call")
	f.IntVar(&runners, "engine-calls", 4, "most merged engine calls in flight; they share the engine step by step")
	f.StringVar(&maxBody, "max-body", "32MiB", "largest request body (larger: 413)")
	f.DurationVar(&bodyTO, "body-timeout", 30*time.Second, "time to receive a request body (slower: 408)")
	f.DurationVar(&hdrTO, "header-timeout", 10*time.Second, "time to receive request headers")
	f.DurationVar(&idleTO, "idle-timeout", 120*time.Second, "keep-alive connections idle this long are closed")
	f.DurationVar(&grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

// loopback reports whether a listener address is a loopback one.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// parseBytes reads a size: plain bytes or a number with a unit (KB, MB, GB,
// KiB, MiB, GiB, TiB; case-insensitive).
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v != v || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("size %q: want a non-negative number of bytes, optionally with a unit (e.g. 6GiB)", s)
	}
	return int64(v * float64(mult)), nil
}
