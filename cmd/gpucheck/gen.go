package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// generateCmd: -new tokens after each row, greedy (temperature 0: argmax)
// and sampled with temperature 1 and top-k 1 (the sampler's path, whose
// only candidate is the argmax), with no stop token, so that both must
// equal transformers' greedy search.
func generateCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	in := fs.String("in", "", "rows JSON: {\"rows\": [[id, …], …]}, the prompts")
	n := fs.Int("new", 16, "new tokens per prompt")
	return func() (any, error) {
		rows, err := readRows(*in)
		if err != nil {
			return nil, err
		}
		m, _, err := c.load()
		if err != nil {
			return nil, err
		}
		defer m.Close()
		g := generate.New(m, nil, generate.Options{MaxBatch: len(rows)})
		reqs := make([]generate.Request, len(rows))
		for i, r := range rows {
			reqs[i] = generate.Request{Prompt: r, MaxNewTokens: *n}
		}
		tokens := func() ([][]int, error) {
			out, err := g.Generate(context.Background(), reqs)
			if err != nil {
				return nil, err
			}
			ids := make([][]int, len(out))
			for i, o := range out {
				ids[i] = o[0].Tokens
			}
			return ids, nil
		}
		greedy, err := tokens()
		if err != nil {
			return nil, err
		}
		for i := range reqs {
			reqs[i].Sampling = sample.Params{Temperature: 1, TopK: 1}
			reqs[i].Seed = uint64(i + 1)
		}
		sampled, err := tokens()
		if err != nil {
			return nil, err
		}
		return map[string]any{"greedy": greedy, "sampled": sampled, "device": c.device, "dtype": torch.DTypeName(m.DType())}, nil
	}
}

// decodeCmd times greedy decoding of -batch random prompts of -prompt
// tokens for -new tokens each (no stop token), -reps times after one
// untimed run, and writes the prompts to -prompts for the reference.
func decodeCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	batch := fs.Int("batch", 8, "prompts decoded together")
	prompt := fs.Int("prompt", 32, "tokens per prompt")
	n := fs.Int("new", 64, "new tokens per prompt")
	reps := fs.Int("reps", 3, "timed runs (the median counts)")
	prompts := fs.String("prompts", "", "write the prompts here (rows JSON)")
	return func() (any, error) {
		m, dev, err := c.load()
		if err != nil {
			return nil, err
		}
		defer m.Close()
		r := rand.New(rand.NewPCG(7, 11))
		rows := make([][]int, *batch)
		reqs := make([]generate.Request, *batch)
		for i := range rows {
			rows[i] = make([]int, *prompt)
			for j := range rows[i] {
				rows[i][j] = r.IntN(m.Config().VocabSize)
			}
			reqs[i] = generate.Request{Prompt: rows[i], MaxNewTokens: *n}
		}
		if *prompts != "" {
			b, _ := json.Marshal(map[string]any{"rows": rows})
			if err := os.WriteFile(*prompts, b, 0o644); err != nil {
				return nil, err
			}
		}
		g := generate.New(m, nil, generate.Options{MaxBatch: *batch})
		var times []float64
		for i := 0; i <= *reps; i++ {
			if err := torch.Synchronize(dev); err != nil {
				return nil, err
			}
			t0 := time.Now()
			out, err := g.Generate(context.Background(), reqs)
			if err != nil {
				return nil, err
			}
			if err := torch.Synchronize(dev); err != nil {
				return nil, err
			}
			if i > 0 {
				times = append(times, time.Since(t0).Seconds())
			}
			for _, o := range out {
				if len(o[0].Tokens) != *n {
					return nil, fmt.Errorf("decode: a row stopped after %d of %d tokens", len(o[0].Tokens), *n)
				}
			}
		}
		med := median(times)
		return map[string]any{
			"tokens_per_s": float64(*batch**n) / med, "seconds": times, "median_s": med,
			"batch": *batch, "prompt": *prompt, "new": *n, "device": c.device, "dtype": torch.DTypeName(m.DType()),
		}, nil
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
