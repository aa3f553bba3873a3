package llama_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/torch"
)

// Benchmark shape: the "small" preset (4 layers, hidden 256, Qwen vocab), one
// thread for both engines.
const benchB, benchT, benchThreads = 1, 128, 1

var benchSetup struct {
	once sync.Once
	dir  string
	hf   struct {
		PrefillTokS float64 `json:"prefill_tok_s"`
		FwdBwdS     float64 `json:"fwd_bwd_s"`
	}
	err error
}

// benchCheckpoint writes the small preset once and times transformers on it.
func benchCheckpoint(b *testing.B) string {
	benchSetup.once.Do(func() {
		dir := filepath.Join(b.TempDir(), "small")
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "small", Seed: 1, OutDir: dir}); err != nil {
			benchSetup.err = err
			return
		}
		benchSetup.dir = dir
		out := testutil.RunPython(b, "hf_bench_forward.py", dir, fmt.Sprint(benchB), fmt.Sprint(benchT), fmt.Sprint(benchThreads))
		benchSetup.err = json.Unmarshal(out, &benchSetup.hf)
	})
	if benchSetup.err != nil {
		b.Fatal(benchSetup.err)
	}
	return benchSetup.dir
}

func benchIDs(s *torch.Scope, vocab int) *torch.Tensor {
	ids := make([]int64, benchB*benchT)
	for i := range ids {
		ids[i] = int64((i*7919 + 13) % vocab)
	}
	return s.FromInt64(ids, benchB, benchT)
}

// BenchmarkVsHF times our prefill and forward+backward against transformers
// on the same checkpoint and CPU thread count; "x_hf" is ours/HF speed.
func BenchmarkVsHF(b *testing.B) {
	dir := benchCheckpoint(b)
	torch.SetNumThreads(benchThreads)
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	vocab := m.Config().VocabSize

	b.Run("prefill", func(b *testing.B) {
		defer torch.SetGrad(false)()
		for i := 0; i < b.N; i++ {
			s := torch.NewScope()
			if _, err := m.Forward(s, model.Batch{IDs: benchIDs(s, vocab)}); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
		tokS := float64(b.N*benchB*benchT) / b.Elapsed().Seconds()
		b.ReportMetric(tokS, "tok/s")
		b.ReportMetric(benchSetup.hf.PrefillTokS, "hf_tok/s")
		b.ReportMetric(tokS/benchSetup.hf.PrefillTokS, "x_hf")
	})

	b.Run("forward_backward", func(b *testing.B) {
		defer torch.SetGrad(true)()
		if err := model.SetRequiresGrad(m, true); err != nil {
			b.Fatal(err)
		}
		defer model.SetRequiresGrad(m, false)
		for i := 0; i < b.N; i++ {
			s := torch.NewScope()
			ids := benchIDs(s, vocab)
			logits, err := m.Forward(s, model.Batch{IDs: ids})
			if err != nil {
				b.Fatal(err)
			}
			lp := s.LogSoftmax(s.Narrow(logits, 1, 0, benchT-1), -1, torch.Float32) // (B, T-1, V)
			tgt := s.Unsqueeze(s.Narrow(ids, 1, 1, benchT-1), -1)                   // (B, T-1, 1)
			loss := s.Neg(s.Mean(s.Gather(lp, -1, tgt)))                            // ()
			if err := s.Err(); err != nil {
				b.Fatal(err)
			}
			if err := torch.Backward(loss); err != nil {
				b.Fatal(err)
			}
			for _, p := range m.Parameters() {
				if err := torch.ZeroGrad(p.Tensor); err != nil {
					b.Fatal(err)
				}
			}
			s.Close()
		}
		step := b.Elapsed().Seconds() / float64(b.N)
		b.ReportMetric(step, "s/step")
		b.ReportMetric(benchSetup.hf.FwdBwdS, "hf_s/step")
		b.ReportMetric(benchSetup.hf.FwdBwdS/step, "x_hf")
	})
}

// BenchmarkDecodeStep times one KV-cached decode step (batch 1, after a
// 64-token prompt, and after a 2,048-token one: tiny-2k, small-2k; hidden
// states only) on the tiny and small presets, through the plain Go path and
// through model/fused, in one process:
//
//	go test -run '^$' -bench DecodeStep ./model/llama
//
// The paths compute the same bits (TestFusedEqualsPlain); the difference is
// the per-op cost around ~95 ATen ops a layer and, more so after the long
// prompt, the plain path's copies of the KV cache to the query heads
// (repeatKV; docs/engine.md, "Attention").
func BenchmarkDecodeStep(b *testing.B) {
	torch.SetNumThreads(benchThreads)
	defer torch.SetGrad(false)()
	defer llama.SetFused(llama.SetFused(true))
	for _, preset := range []string{"tiny", "small"} {
		dir := filepath.Join(b.TempDir(), preset)
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: preset, Seed: 1, OutDir: dir}); err != nil {
			b.Fatal(err)
		}
		m, err := model.Load(dir, model.LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, prompt := range []int64{64, 2048} {
			name := preset
			if prompt != 64 {
				name += fmt.Sprintf("-%dk", prompt/1024)
			}
			for _, path := range []string{"plain", "fused"} {
				b.Run(name+"/"+path, func(b *testing.B) {
					// Grad mode is the OS thread's, and a sub-benchmark runs
					// on a goroutine of its own: without this both paths ran
					// plain, with grad on.
					defer torch.SetGrad(false)()
					llama.SetFused(path == "fused")
					cache, err := model.NewCache(m, 1, int(prompt)+1)
					if err != nil {
						b.Fatal(err)
					}
					defer cache.Close()
					s := torch.NewScope()
					defer s.Close()
					ids := make([]int64, prompt)
					for i := range ids {
						ids[i] = int64(i*7919+13) % int64(m.Config().VocabSize)
					}
					if _, err := m.Hidden(s, model.Batch{IDs: s.FromInt64(ids, 1, prompt), Cache: cache}); err != nil {
						b.Fatal(err)
					}
					next := s.FromInt64([]int64{42}, 1, 1)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := cache.Truncate(int(prompt)); err != nil {
							b.Fatal(err)
						}
						c := s.Child()
						if _, err := m.Hidden(c, model.Batch{IDs: next, Cache: cache}); err != nil {
							b.Fatal(err)
						}
						c.Close()
					}
					b.StopTimer()
					if err := cache.Truncate(int(prompt)); err != nil {
						b.Fatal(err)
					}
					before := fused.Calls()
					c := s.Child()
					if _, err := m.Hidden(c, model.Batch{IDs: next, Cache: cache}); err != nil {
						b.Fatal(err)
					}
					c.Close()
					if ran := fused.Calls() > before; ran != (path == "fused") {
						b.Fatalf("%s path: the fused stack ran: %v", path, ran)
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
				})
			}
		}
		m.Close()
	}
}
