package main

import (
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"

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
		grace    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --model DIR [--addr 127.0.0.1:8000]",
		Short: "Serve a checkpoint over an OpenAI-compatible HTTP API (completions, chat, log-probs, models)",
		Long: `Loads an HF checkpoint with the in-process torch engine and serves
/v1/models, /v1/completions and /v1/chat/completions (n, seed, stop, logprobs)
on --addr until interrupted, so that the openai backend of the stages, or any
OpenAI client, can use it. Chats are rendered with the checkpoint's Qwen3 chat
template; seeds follow the torch backend (sample j of seed s uses s+j).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := torchbe.Load(o)
			if err != nil {
				return err
			}
			defer m.Close()
			h, err := serve.NewHandler(serve.Config{Generator: m, Model: m.ID(), RenderChat: m.RenderChat,
				MaxTopLogprobs: topLP, MaxBatch: maxBatch})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			slog.Info("serving", "model", m.ID(), "addr", "http://"+ln.Addr().String()+"/v1")
			return serve.Serve(cmd.Context(), ln, h, grace)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "model", "", "checkpoint directory (config.json, safetensors, tokenizer.json)")
	f.StringVar(&o.ModelID, "model-id", "", "model id served at /v1/models (default: the directory's base name)")
	f.StringVar(&o.Device, "device", "cpu", "cpu, cuda or cuda:N")
	f.StringVar(&o.DType, "dtype", "", "parameter dtype (default: float32 on CPU, bfloat16 on CUDA)")
	f.IntVar(&o.Threads, "threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	f.IntVar(&o.MaxBatch, "max-batch", 64, "most sequences the engine decodes together")
	f.BoolVar(&o.DisableThinking, "disable-thinking", false, "render chats with enable_thinking=False")
	f.StringVar(&addr, "addr", "127.0.0.1:8000", "listen address (port 0 picks a free one)")
	f.IntVar(&topLP, "max-top-logprobs", 20, "most top log-probs per position a request may ask for")
	f.IntVar(&maxBatch, "coalesce", 64, "most concurrent requests the server merges into one engine call")
	f.DurationVar(&grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}
