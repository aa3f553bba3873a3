// Command grpo-bench times one GRPO optimizer step of evolm's in-process
// trainer (stages/learner.Trainer.TrainStep) on one checkpoint and one fixed
// batch; compare.py in this directory runs it side by side with the same step
// written in PyTorch + HF transformers, on the same checkpoint, batch and
// thread count, and prints the ratio.
//
//	go run ./bench/grpo -model DIR -init small            # create the checkpoint
//	go run ./bench/grpo -model DIR -make-batch batch.json # draw the batch
//	go run ./bench/grpo -model DIR -batch batch.json -threads 1 -reps 3
//
// The batch (batch.go) carries token ids, advantages, old log-probs and the
// reference model's log-probs, so a step is: score the batch with grad
// (generate.Score), the clipped-surrogate loss with k3 KL (β = 0.001,
// ε = 0.2, grpo normalisation), backward accumulated over micro-batches,
// global-norm clip at 1.0 and AdamW (lr 1e-6, no weight decay). The reference
// model is not run during the step on either side.
//
// The timing run prints one JSON object: the median of -reps timed steps after
// -warmup untimed ones, every step's time, and every step's statistics (loss,
// grad norm, KL, clip fraction), so the peer can check it computed the same
// losses step by step.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/evolm/evolm/bench/internal/stat"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/learner"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/torch"
)

func main() {
	dir := flag.String("model", "", "HF checkpoint directory")
	preset := flag.String("init", "", "only create a random Qwen3 checkpoint of this preset (tiny, small) at -model, then exit")
	makeBatch := flag.String("make-batch", "", "only draw the batch (DefaultSpec, -seed) from -model and write it here, then exit")
	seed := flag.Uint64("seed", 1, "seed of the batch drawn by -make-batch")
	batch := flag.String("batch", "", "batch JSON written by -make-batch")
	threads := flag.Int("threads", 1, "libtorch intra-op threads")
	warmup := flag.Int("warmup", 1, "untimed steps first")
	reps := flag.Int("reps", 3, "timed steps (the median is reported)")
	micro := flag.Int("micro-batch", 8, "sequences per forward/backward pass")
	flag.Parse()
	torch.SetNumThreads(*threads)
	var err error
	switch {
	case *preset != "":
		_, err = model.Init(model.InitOptions{Arch: "qwen3", Preset: *preset, Seed: 1, OutDir: *dir})
	case *makeBatch != "":
		err = writeBatch(*dir, *makeBatch, *seed)
	default:
		err = run(*dir, *batch, *warmup, *reps, *micro)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpo-bench:", err)
		os.Exit(1)
	}
}

func writeBatch(dir, path string, seed uint64) error {
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return err
	}
	defer m.Close()
	spec := DefaultSpec()
	spec.Seed = seed
	b, err := MakeBatch(context.Background(), m, spec)
	if err != nil {
		return err
	}
	return b.Write(path)
}

// StepStats is one step's report.
type StepStats struct {
	Seconds  float64 `json:"seconds"`
	Loss     float64 `json:"loss"`
	GradNorm float64 `json:"grad_norm"`
	KL       float64 `json:"kl"`
	ClipFrac float64 `json:"clip_frac"`
	Tokens   int     `json:"tokens"`
}

// newTrainer loads dir as the policy and builds the trainer of the compared
// step: the paper's defaults with micro micro-batches.
func newTrainer(dir string, micro int) (*learner.Trainer, error) {
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return nil, err
	}
	cfg := learner.DefaultTrainerConfig()
	cfg.MicroBatch = micro
	tr, err := learner.NewTrainer(m, nil, cfg, model.SaveOptions{})
	if err != nil {
		m.Close()
		return nil, err
	}
	return tr, nil
}

// step runs one timed TrainStep.
func step(ctx context.Context, tr *learner.Trainer, b *Batch) (StepStats, error) {
	samples := b.Samples()
	t0 := time.Now()
	st, err := tr.TrainStep(ctx, samples)
	if err != nil {
		return StepStats{}, err
	}
	return StepStats{Seconds: time.Since(t0).Seconds(), Loss: st.Loss, GradNorm: st.GradNorm, KL: st.KL, ClipFrac: st.ClipFrac, Tokens: st.Tokens}, nil
}

func run(dir, batchPath string, warmup, reps, micro int) error {
	if reps <= 0 {
		return fmt.Errorf("reps = %d, want > 0", reps)
	}
	b, err := ReadBatch(batchPath)
	if err != nil {
		return err
	}
	tr, err := newTrainer(dir, micro)
	if err != nil {
		return err
	}
	defer tr.Policy.Close()
	defer tr.Close()
	ctx := context.Background()
	var steps []StepStats
	var times []float64
	for i := 0; i < warmup+reps; i++ {
		st, err := step(ctx, tr, b)
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		steps = append(steps, st)
		if i >= warmup {
			times = append(times, st.Seconds)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"threads":     torch.NumThreads(),
		"micro_batch": micro,
		"warmup":      warmup,
		"step_s":      stat.Median(times),
		"steps":       steps,
	})
}
