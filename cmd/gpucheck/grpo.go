package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/learner"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// grpoRow is one sequence of the GRPO batch both sides train on.
type grpoRow struct {
	Prompt     []int     `json:"prompt"`
	Completion []int     `json:"completion"`
	Advantage  float64   `json:"advantage"`
	OldLogps   []float64 `json:"old_logps"`
	RefLogps   []float64 `json:"ref_logps"`
}

// batchCmd draws the batch: -prompts random prompts, -group random
// completions each, group advantages of uniform rewards ((r − mean) /
// (std + 1e-4), std unbiased as TRL's), and old and reference log-probs
// equal to the model's own plus N(0, 0.1²), so that the ratio stays near 1
// and the KL small, as in a real step.
func batchCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	prompts := fs.Int("prompts", 2, "prompts")
	group := fs.Int("group", 4, "completions per prompt")
	plen := fs.Int("prompt-len", 64, "prompt tokens")
	clen := fs.Int("completion-len", 64, "completion tokens")
	out := fs.String("out", "", "batch JSON")
	return func() (any, error) {
		m, _, err := c.load()
		if err != nil {
			return nil, err
		}
		defer m.Close()
		r := rand.New(rand.NewPCG(3, 5))
		ids := func(n int) []int {
			v := make([]int, n)
			for i := range v {
				v[i] = r.IntN(m.Config().VocabSize)
			}
			return v
		}
		var rows []grpoRow
		var conts []generate.Continuation
		for p := 0; p < *prompts; p++ {
			prompt := ids(*plen)
			rewards := make([]float64, *group)
			mean := 0.0
			for i := range rewards {
				rewards[i] = r.Float64()
				mean += rewards[i] / float64(*group)
			}
			v := 0.0
			for _, x := range rewards {
				v += (x - mean) * (x - mean) / float64(*group-1)
			}
			for i := range rewards {
				row := grpoRow{Prompt: prompt, Completion: ids(*clen), Advantage: (rewards[i] - mean) / (math.Sqrt(v) + 1e-4)}
				rows = append(rows, row)
				conts = append(conts, generate.Continuation{Prompt: row.Prompt, Completion: row.Completion})
			}
		}
		lps, _, err := generate.LogProbs(context.Background(), m, conts, len(conts), false)
		if err != nil {
			return nil, err
		}
		for i := range rows {
			for _, lp := range lps[i] {
				rows[i].OldLogps = append(rows[i].OldLogps, float64(lp)+0.1*r.NormFloat64())
				rows[i].RefLogps = append(rows[i].RefLogps, float64(lp)+0.1*r.NormFloat64())
			}
		}
		b, err := json.Marshal(map[string]any{"rows": rows})
		if err != nil {
			return nil, err
		}
		return map[string]any{"rows": len(rows)}, os.WriteFile(*out, b, 0o644)
	}
}

// grpoCmd times the learner's GRPO step (learner.Trainer.TrainStep, the
// paper's defaults: ε 0.2, β 0.001 k3 KL on the batch's reference
// log-probs, grpo normalisation, clip 1.0, AdamW lr 1e-6, full
// fine-tuning) on the batch: -warmup untimed steps, then -reps timed.
func grpoCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	path := fs.String("batch", "", "batch JSON (gpucheck batch)")
	micro := fs.Int("micro", 8, "sequences per forward/backward")
	warmup := fs.Int("warmup", 1, "untimed steps first")
	reps := fs.Int("reps", 3, "timed steps (the median counts)")
	return func() (any, error) {
		raw, err := os.ReadFile(*path)
		if err != nil {
			return nil, err
		}
		var b struct{ Rows []grpoRow }
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("%s: %w", *path, err)
		}
		m, dev, err := c.load()
		if err != nil {
			return nil, err
		}
		defer m.Close()
		cfg := learner.DefaultTrainerConfig()
		cfg.MicroBatch = *micro
		tr, err := learner.NewTrainer(m, nil, cfg, model.SaveOptions{})
		if err != nil {
			return nil, err
		}
		defer tr.Close()
		samples := make([]backend.TrainSample, len(b.Rows))
		for i, r := range b.Rows {
			samples[i] = backend.TrainSample{PromptTokenIDs: r.Prompt, CompletionTokenIDs: r.Completion, Advantage: r.Advantage,
				OldLogProbs: r.OldLogps, RefLogProbs: r.RefLogps}
		}
		var steps []map[string]any
		var times []float64
		for i := 0; i < *warmup+*reps; i++ {
			if err := torch.Synchronize(dev); err != nil {
				return nil, err
			}
			t0 := time.Now()
			st, err := tr.TrainStep(context.Background(), samples)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i+1, err)
			}
			if err := torch.Synchronize(dev); err != nil {
				return nil, err
			}
			sec := time.Since(t0).Seconds()
			if i >= *warmup {
				times = append(times, sec)
			}
			steps = append(steps, map[string]any{"seconds": sec, "loss": st.Loss, "grad_norm": st.GradNorm, "kl": st.KL, "tokens": st.Tokens, "skipped": st.Skipped})
		}
		return map[string]any{"step_s": median(times), "steps": steps, "device": c.device, "dtype": torch.DTypeName(m.DType()), "micro": *micro}, nil
	}
}
