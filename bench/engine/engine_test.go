package main

import (
	"math/rand/v2"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// Go benchmarks of the same measurements on the tiny preset (compare.py
// runs the small one against HF):
//
//	go test -run '^$' -bench . -benchtime 3x ./bench/engine
func benchModel(b *testing.B) (model.CausalLM, *Workload) {
	b.Helper()
	dir := b.TempDir()
	modeltest.InitTiny(b, dir, 1)
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	torch.SetNumThreads(1)
	r := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = r.IntN(m.Config().VocabSize)
		}
		return out
	}
	w := &Workload{Prefill: ids(256), GenPrompt: ids(32), GenNew: 32, Samples: 8, SampledNew: 16}
	for i := 0; i < 4; i++ {
		w.Prompts = append(w.Prompts, ids(32))
		w.TrainRows = append(w.TrainRows, struct {
			Prompt     []int `json:"prompt"`
			Completion []int `json:"completion"`
		}{ids(32), ids(32)})
	}
	return m, w
}

func BenchmarkPrefill(b *testing.B) {
	m, w := benchModel(b)
	for b.Loop() {
		if err := prefill(m, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(w.Prefill)*b.N)/b.Elapsed().Seconds(), "tok/s")
}

func BenchmarkGreedyB1(b *testing.B) { benchTokens(b, greedyB1) }

func BenchmarkSampled8x4(b *testing.B) { benchTokens(b, sampled) }

// benchTokens times gen, which returns the tokens it generated, on the
// workload and reports tokens per second.
func benchTokens(b *testing.B, gen func(model.CausalLM, *Workload) (int, error)) {
	m, w := benchModel(b)
	n := 0
	for b.Loop() {
		k, err := gen(m, w)
		if err != nil {
			b.Fatal(err)
		}
		n += k
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
}

func BenchmarkFwdBwd(b *testing.B) {
	m, w := benchModel(b)
	if err := model.SetRequiresGrad(m, true); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := fwdBwd(m, w); err != nil {
			b.Fatal(err)
		}
	}
}
