//go:build e2e

package main

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/server/servertest"
	"github.com/evolm/evolm/serving/torchbe"
)

// BenchmarkThroughputTorch serves a tiny random Qwen3 checkpoint with the
// torch engine and measures the `openai` backend against it as requests in
// flight scale, with the server coalescing concurrent requests into batches
// (batch=64) and without (batch=1, one engine call per request). The model
// and the handler are set up as `evolm serve` sets them up: the engine on
// one thread (torchbe.Options.OneThread) and 4 engine calls at once
// (--engine-calls).
//
//	go test -tags e2e -run '^$' -bench ThroughputTorch -benchtime 128x ./bench/openai
func BenchmarkThroughputTorch(b *testing.B) {
	dir := b.TempDir()
	modeltest.InitTiny(b, dir, 1)
	m, err := torchbe.Load(torchbe.Options{Dir: dir, ModelID: "tiny", OneThread: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	for _, batch := range []int{1, 64} {
		h, err := server.NewHandler(server.Config{Generator: m, Model: "tiny", RenderChat: m.RenderChat, MaxBatch: batch, BatchRunners: 4,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		url := "http://" + servertest.Start(b, h, server.ServerOptions{Grace: 10 * time.Second}) + "/v1"
		for _, k := range []int{1, 4, 16, 64} {
			b.Run(fmt.Sprintf("batch=%d/inflight=%d", batch, k), func(b *testing.B) {
				cfg := config{endpoints: []string{url}, model: "tiny", requests: b.N, maxTokens: 16,
					prompt: "Write one sentence about the sea.", logprobs: -1}
				r := benchMeasure(b, cfg, k)
				b.ReportMetric(r.tokPerSec, "tok/s")
				b.ReportMetric(ms(r.p50), "p50_ms")
			})
		}
	}
}
