package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

// serveLong is `evolm serve --help`'s text.
const serveLong = `Loads an HF checkpoint with the in-process torch engine and serves the
OpenAI and vLLM HTTP API on --addr until interrupted, so that the openai backend
of the stages, the openai SDK, lm-evaluation-harness or any OpenAI client can
use it:
  GET  /v1/models                 the model (max_model_len) and loaded adapters
  POST /v1/completions            text or token-id prompts, n, seed, stop, logprobs,
                                  echo, prompt_logprobs, streaming
  POST /v1/chat/completions       the checkpoint's Qwen3 chat template (tools, tool
                                  messages, enable_thinking, continue_final_message),
                                  tool calls, logprobs, streaming
  POST /tokenize, /detokenize     vLLM's tokenizer routes; GET /version, /health
vLLM's sampling controls (penalties, logit_bias, min_p, min_tokens, stop_token_ids
…) and structured output (response_format json_object and json_schema,
guided_json, guided_choice, by constrained decoding) are implemented; every
other field is refused with a 400 that names it (package serving/server lists
them). Seeds follow the torch backend (sample j of seed s uses s+j).

Concurrent requests share the engine step by step, so a large request does
not starve a small one; a client that disconnects stops its decoding. A
request over --max-model-len or the --memory-budget is answered 400 before any
work; an engine failure (out of memory) fails that request with 503 and the
server goes on. With --api-key (or EVOLM_API_KEY) every route but /health and
/version needs "Authorization: Bearer <key>", as vLLM's --api-key. Every POST
must be sent as application/json.

Runtime weight updates, for an RL learner that keeps a fleet of servers in
step with its weights (evolm run's generation_backend openai), are off unless
enabled, and read only from directories under --load-root:
  POST /update_weights_from_disk   (--enable-weight-updates) SGLang's API:
                                   {"model_path", "load_format", "weight_version"};
                                   the checkpoint replaces the served weights and
                                   the served model's name becomes model_path
  POST /v1/load_lora_adapter       (--enable-lora) vLLM's API: {"lora_name",
  POST /v1/unload_lora_adapter     "lora_path"}; requests naming lora_name run on
                                   the base model with that adapter, which shares
                                   the base weights (up to --max-loras at once)
Requests in flight finish on the weights they started with.`

// newServeCmd is `evolm serve`: the torch engine behind an OpenAI-compatible
// HTTP server (package serving/server), loaded like the stages load it
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
		loraOn   bool
		updates  bool
		loadRoot string
		maxLoRAs int
	)
	cmd := &cobra.Command{
		Use:   "serve --model DIR [--addr 127.0.0.1:8000]",
		Short: "Serve a checkpoint over an OpenAI-compatible HTTP API (completions, chat, log-probs, models)",
		Long:  serveLong,
		Args:  cobra.NoArgs,
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
			if (updates || loraOn) && loadRoot == "" {
				return fmt.Errorf("--enable-weight-updates and --enable-lora need --load-root: the one directory runtime loads may read from")
			}
			m, err := loadServed(o)
			if err != nil {
				return err
			}
			defer m.Close()
			loader := &torchLoader{opt: o, bases: []*torchbe.Model{m}}
			defer loader.close()
			h, err := server.NewHandler(server.Config{Generator: m, Model: m.ID(), RenderChat: m.RenderChat, Tokenizer: m, Root: o.Dir,
				MaxTopLogprobs: topLP, MaxBatch: maxBatch, BatchRunners: runners, MaxBodyBytes: bodyMax,
				BodyTimeout: bodyTO, APIKey: apiKey, Loader: loader, RuntimeLoRA: loraOn, WeightUpdates: updates,
				LoadRoot: loadRoot, MaxLoRAs: maxLoRAs})
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
			return server.ServeWith(cmd.Context(), ln, h, server.ServerOptions{Grace: grace, ReadHeaderTimeout: hdrTO, IdleTimeout: idleTO})
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
	f.IntVar(&maxBatch, "coalesce", 64, "most concurrent requests (completions, or scores) the server merges into one engine call")
	f.IntVar(&runners, "engine-calls", 4, "most merged engine calls in flight; they share the engine step by step")
	f.StringVar(&maxBody, "max-body", "32MiB", "largest request body (larger: 413)")
	f.DurationVar(&bodyTO, "body-timeout", 30*time.Second, "time to receive a request body (slower: 408)")
	f.DurationVar(&hdrTO, "header-timeout", 10*time.Second, "time to receive request headers")
	f.DurationVar(&idleTO, "idle-timeout", 120*time.Second, "keep-alive connections idle this long are closed")
	f.DurationVar(&grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	f.BoolVar(&loraOn, "enable-lora", false, "serve vLLM's runtime LoRA routes, /v1/load_lora_adapter and /v1/unload_lora_adapter (needs --load-root)")
	f.BoolVar(&updates, "enable-weight-updates", false, "serve SGLang's /update_weights_from_disk, which replaces the served weights (needs --load-root)")
	f.StringVar(&loadRoot, "load-root", "", "the directory runtime loads may read checkpoints and adapters from; paths outside it are refused")
	f.IntVar(&maxLoRAs, "max-loras", 8, "most LoRA adapters loaded at once (vLLM's --max-loras); each holds only its low-rank factors")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

// loadServed loads a model to serve. All its engine calls run on one engine
// thread (torchbe.Options.OneThread): at --coalesce 1 every connection's
// goroutine calls the engine, and otherwise the batchers' goroutines do (up
// to --engine-calls for completions), which end when idle, so without it
// each of those threads would keep a libgomp worker pool of its own, and
// pools that outnumber the CPUs throttle every op (docs/engine.md, "Threads
// and grad mode").
func loadServed(o torchbe.Options) (*torchbe.Model, error) {
	o.OneThread = true
	return torchbe.Load(o)
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

// torchLoader loads the engines of `evolm serve`'s runtime weight updates
// with the options the server started with: an adapter is a view of the
// current base model (the last update_weights_from_disk's, else --model)
// that shares its weights.
type torchLoader struct {
	opt    torchbe.Options
	mu     sync.Mutex
	bases  []*torchbe.Model // --model, then each update's weights not yet freed: the last is the base
	models []*torchbe.Model // loaded and not yet freed, for shutdown
}

func (l *torchLoader) engine(m *torchbe.Model) *server.Engine {
	l.mu.Lock()
	l.models = append(l.models, m)
	l.mu.Unlock()
	return &server.Engine{Generator: m, Scorer: m, RenderChat: m.RenderChat, Tokenizer: m, Close: func() {
		m.Close()
		l.mu.Lock()
		drop := func(x *torchbe.Model) bool { return x == m }
		l.models, l.bases = slices.DeleteFunc(l.models, drop), slices.DeleteFunc(l.bases, drop)
		l.mu.Unlock()
	}}
}

func (l *torchLoader) LoadAdapter(ctx context.Context, path string) (*server.Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	base := l.bases[len(l.bases)-1]
	l.mu.Unlock()
	v, err := base.WithAdapter(path, path)
	if err != nil {
		return nil, err
	}
	return l.engine(v), nil
}

func (l *torchLoader) LoadWeights(ctx context.Context, path, format string) (*server.Engine, error) {
	switch format {
	case "", "auto", "safetensors":
	default:
		return nil, fmt.Errorf("load_format %q: evolm serve reads safetensors checkpoints (auto or safetensors)", format)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opt := l.opt
	opt.Dir, opt.ModelID = path, path
	m, err := loadServed(opt)
	if err != nil {
		return nil, err
	}
	e := l.engine(m)
	l.mu.Lock()
	l.bases = append(l.bases, m)
	l.mu.Unlock()
	return e, nil
}

// close frees the engines still loaded when the server stops.
func (l *torchLoader) close() {
	l.mu.Lock()
	ms := l.models
	l.models = nil
	l.mu.Unlock()
	for _, m := range ms {
		m.Close()
	}
}
