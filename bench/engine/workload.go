package main

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// Workload is the shared input of both sides (compare.py writes it).
type Workload struct {
	Prefill    []int   `json:"prefill"`     // one prompt, timed as a single forward pass (last-position logits)
	GenPrompt  []int   `json:"gen_prompt"`  // batch 1: greedy, GenNew tokens
	GenNew     int     `json:"gen_new"`     // new tokens for batch 1
	Prompts    [][]int `json:"prompts"`     // the sampled batch: each prompt × Samples
	Samples    int     `json:"samples"`     // samples per prompt (temperature 1, no filters)
	SampledNew int     `json:"sampled_new"` // new tokens per sample
	TrainRows  []struct {
		Prompt     []int `json:"prompt"`
		Completion []int `json:"completion"`
	} `json:"train"` // one forward+backward of −mean completion log-prob
}

// continuations converts TrainRows for generate.Score.
func (w *Workload) continuations() []generate.Continuation {
	out := make([]generate.Continuation, len(w.TrainRows))
	for i, r := range w.TrainRows {
		out[i] = generate.Continuation{Prompt: r.Prompt, Completion: r.Completion}
	}
	return out
}

// prefill runs one forward pass over w.Prefill and materializes the last
// position's logits, as generate's prefill does.
func prefill(m model.CausalLM, w *Workload) error {
	_, err := prefillLogits(m, w, false)
	return err
}

// prefillLogits is prefill; with values it also returns the last position's
// logits (the equality check against HF).
func prefillLogits(m model.CausalLM, w *Workload, values bool) ([]float32, error) {
	defer torch.SetGrad(false)()
	s := torch.NewScope()
	defer s.Close()
	ids := make([]int64, len(w.Prefill))
	for i, id := range w.Prefill {
		ids[i] = int64(id)
	}
	h, err := m.Hidden(s, model.Batch{IDs: s.FromInt64(ids, 1, int64(len(ids)))})
	if err != nil {
		return nil, err
	}
	lg, err := m.Logits(s, s.Narrow(h, 1, int64(len(ids))-1, 1))
	if err != nil {
		return nil, err
	}
	if values {
		return torch.Float32s(lg)
	}
	_, err = torch.Item(s.Sum(lg)) // wait for the result
	return nil, err
}

// greedyB1 generates w.GenNew greedy tokens for w.GenPrompt.
func greedyB1(m model.CausalLM, w *Workload) (int, error) {
	ids, err := greedyIDs(m, w)
	return len(ids), err
}

// greedyIDs is greedyB1's generation, returning the token ids.
func greedyIDs(m model.CausalLM, w *Workload) ([]int, error) {
	out, err := generate.New(m, nil, generate.Options{}).Generate(context.Background(), []generate.Request{
		{Prompt: w.GenPrompt, MaxNewTokens: w.GenNew},
	})
	if err != nil {
		return nil, err
	}
	return out[0][0].Tokens, nil
}

// sampled draws w.Samples samples of w.SampledNew tokens for every prompt.
func sampled(m model.CausalLM, w *Workload) (int, error) {
	reqs := make([]generate.Request, len(w.Prompts))
	for i, p := range w.Prompts {
		reqs[i] = generate.Request{Prompt: p, N: w.Samples, MaxNewTokens: w.SampledNew, Seed: uint64(100 * i),
			Sampling: sample.Params{Temperature: 1}}
	}
	out, err := generate.New(m, nil, generate.Options{MaxBatch: len(w.Prompts) * w.Samples}).Generate(context.Background(), reqs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ss := range out {
		for _, s := range ss {
			n += len(s.Tokens)
		}
	}
	return n, nil
}

// fwdBwd is one forward+backward pass of −mean over rows of the mean
// completion log-prob; gradients are zeroed afterwards.
//
// It runs inside fused.KeepBlocks, as train.Trainer.Step runs every
// micro-batch: the pass's large host blocks (logits, their softmax and
// gradient) reuse each other instead of being mapped afresh.
func fwdBwd(m model.CausalLM, w *Workload) error {
	return fused.KeepBlocks(func() error {
		_, err := fwdBwdLoss(m, w)
		return err
	})
}

// fwdBwdLoss is fwdBwd, returning the loss.
func fwdBwdLoss(m model.CausalLM, w *Workload) (float64, error) {
	restore := torch.SetGrad(true)
	defer restore()
	s := torch.NewScope()
	defer s.Close()
	sc, err := generate.Score(s, m, w.continuations(), false)
	if err != nil {
		return 0, err
	}
	lens := make([]float32, len(sc.Lens))
	for i, n := range sc.Lens {
		lens[i] = float32(n)
	}
	loss := s.Neg(s.Mean(s.Div(s.SumDim(sc.LogProbs, []int64{1}, false), s.FromFloat32(lens, int64(len(lens))))))
	if err := s.Err(); err != nil {
		return 0, err
	}
	if err := torch.Backward(loss); err != nil {
		return 0, err
	}
	for _, p := range m.Parameters() {
		if err := torch.ZeroGrad(p.Tensor); err != nil {
			return 0, fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return torch.Item(loss)
}
