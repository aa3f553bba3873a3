package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/serving/backend"
)

// Spec sizes the benchmark batch.
type Spec struct {
	Prompts       int     `json:"prompts"`        // distinct prompts
	Group         int     `json:"group"`          // completions per prompt
	PromptLen     int     `json:"prompt_len"`     // tokens per prompt
	CompletionLen int     `json:"completion_len"` // tokens per completion
	Noise         float64 `json:"noise"`          // std of the old/ref log-prob offsets
	Seed          uint64  `json:"seed"`
}

// DefaultSpec is the compared batch: 8 prompts × 4 completions, 64 + 64 tokens.
func DefaultSpec() Spec {
	return Spec{Prompts: 8, Group: 4, PromptLen: 64, CompletionLen: 64, Noise: 0.1, Seed: 1}
}

// Row is one training sequence of the batch file.
type Row struct {
	Prompt     []int     `json:"prompt"`
	Completion []int     `json:"completion"`
	Advantage  float64   `json:"advantage"`
	OldLogP    []float64 `json:"old_logps"`
	RefLogP    []float64 `json:"ref_logps"`
}

// Batch is the file both sides of the comparison read.
type Batch struct {
	Spec Spec  `json:"spec"`
	Rows []Row `json:"rows"`
}

// MakeBatch draws the batch from spec.Seed: uniform token ids, uniform
// rewards turned into group advantages (grpo.GroupAdvantages, TRL's
// unbiased std), and old/reference log-probs equal to m's own log-probs of
// the completions plus independent N(0, Noise²) offsets, so that the ratio
// stays near 1 (some tokens clipped) and the k3 KL is small, as in a real
// step. m is only read (no grad).
func MakeBatch(ctx context.Context, m model.CausalLM, spec Spec) (*Batch, error) {
	if spec.Prompts <= 0 || spec.Group <= 1 || spec.PromptLen <= 0 || spec.CompletionLen <= 0 {
		return nil, fmt.Errorf("batch spec %+v: want prompts > 0, group > 1 and lengths > 0", spec)
	}
	r := rand.New(rand.NewPCG(spec.Seed, 0x9e3779b97f4a7c15))
	vocab := m.Config().VocabSize
	ids := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = r.IntN(vocab)
		}
		return out
	}
	b := &Batch{Spec: spec}
	var conts []generate.Continuation
	for p := 0; p < spec.Prompts; p++ {
		prompt := ids(spec.PromptLen)
		rewards := make([]float64, spec.Group)
		for i := range rewards {
			rewards[i] = r.Float64()
		}
		adv, _ := grpo.GroupAdvantages(rewards, grpo.FillGroupMean, true)
		for g := 0; g < spec.Group; g++ {
			row := Row{Prompt: prompt, Completion: ids(spec.CompletionLen), Advantage: adv[g]}
			b.Rows = append(b.Rows, row)
			conts = append(conts, generate.Continuation{Prompt: row.Prompt, Completion: row.Completion})
		}
	}
	lps, _, err := generate.LogProbs(ctx, m, conts, spec.Group, false)
	if err != nil {
		return nil, fmt.Errorf("batch log-probs: %w", err)
	}
	for i := range b.Rows {
		old := make([]float64, len(lps[i]))
		ref := make([]float64, len(lps[i]))
		for j, lp := range lps[i] {
			old[j] = float64(lp) + spec.Noise*r.NormFloat64()
			ref[j] = float64(lp) + spec.Noise*r.NormFloat64()
		}
		b.Rows[i].OldLogP, b.Rows[i].RefLogP = old, ref
	}
	return b, nil
}

// Samples returns the batch as TrainStep input (fresh slices each call, so a
// step cannot alter the next one's input).
func (b *Batch) Samples() []backend.TrainSample {
	out := make([]backend.TrainSample, len(b.Rows))
	for i, r := range b.Rows {
		out[i] = backend.TrainSample{
			PromptTokenIDs:     append([]int(nil), r.Prompt...),
			CompletionTokenIDs: append([]int(nil), r.Completion...),
			Advantage:          r.Advantage,
			OldLogProbs:        append([]float64(nil), r.OldLogP...),
			RefLogProbs:        append([]float64(nil), r.RefLogP...),
		}
	}
	return out
}

// Write stores b as JSON at path.
func (b *Batch) Write(path string) error {
	raw, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("batch %s: %w", path, err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("batch %s: %w", path, err)
	}
	return nil
}

// ReadBatch loads a batch written by Write.
func ReadBatch(path string) (*Batch, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b Batch
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("batch %s: %w", path, err)
	}
	for i, r := range b.Rows {
		if len(r.OldLogP) != len(r.Completion) || len(r.RefLogP) != len(r.Completion) {
			return nil, fmt.Errorf("batch %s row %d: %d completion tokens, %d old and %d ref log-probs", path, i, len(r.Completion), len(r.OldLogP), len(r.RefLogP))
		}
	}
	return &b, nil
}
