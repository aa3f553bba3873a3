package main

import (
	"context"
	"testing"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// BenchmarkGRPOStep times one GRPO optimizer step (Trainer.TrainStep) on the
// tiny preset with the compared batch (DefaultSpec: 8 prompts × 4
// completions, 64 + 64 tokens, micro-batch 8), one libtorch thread.
// compare.py runs the same step against PyTorch:
//
//	go test -run '^$' -bench GRPOStep -benchtime 2x ./bench/grpo
func BenchmarkGRPOStep(b *testing.B) {
	dir := b.TempDir()
	modeltest.InitTiny(b, dir, 1)
	torch.SetNumThreads(1)
	ctx := context.Background()
	tr, err := newTrainer(dir, 8)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close(); tr.Policy.Close() })
	batch, err := MakeBatch(ctx, tr.Policy, DefaultSpec())
	if err != nil {
		b.Fatal(err)
	}
	tokens := 0
	var last StepStats
	for b.Loop() {
		if last, err = step(ctx, tr, batch); err != nil {
			b.Fatal(err)
		}
		tokens += last.Tokens
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(last.Loss, "loss")
}
