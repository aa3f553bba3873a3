package main

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/torchbe"
)

// BenchmarkYesNo compares yes/no judging with prefix reuse against the same
// batched scoring without it (full forward passes, the criteria batched
// alike) on a tiny random checkpoint (one op = one (response, rubric) request
// of 4 criteria over a 300-word response):
//
//	go test -run '^$' -bench YesNo -benchtime 5x ./bench/judge
//
// Each side scores on its sub-benchmark's goroutine: libgomp keeps a worker
// pool for every live thread that ran libtorch's parallel ops, and two live
// pools at 2 intra-op threads throttle every op (model/torch's
// claimThread; docs/engine.md, "Threads and grad mode"). model.Init and
// model.Load run on threads of their own that end, so the benchmark's
// goroutine holds none.
func BenchmarkYesNo(b *testing.B) {
	dir, reqs := yesNoWorkload(b)
	for _, side := range []string{"naive", "prefix_reuse"} {
		b.Run(side, func(b *testing.B) {
			m, err := load(dir, "", 0, 64, 0, false, "")
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			scoreLoop(b, m, side, reqs)
		})
	}
}

// BenchmarkYesNoStageShape runs BenchmarkYesNo's workload in the judge
// stage's shape: the model is loaded from one long-lived goroutine (the
// stage's) and scored from another (a shard worker's). Were the loading
// done on the first goroutine's thread, that thread would keep a libgomp
// worker pool beside the worker's, and at 2 intra-op threads on 2 CPUs the
// two pools throttle every op; model.Load runs on a thread of its own that
// ends (docs/engine.md, "Threads and grad mode"):
//
//	go test -run '^$' -bench 'YesNo' -benchtime 200x ./bench/judge
func BenchmarkYesNoStageShape(b *testing.B) {
	dir, reqs := yesNoWorkload(b)
	for _, side := range []string{"naive", "prefix_reuse"} {
		m, err := load(dir, "", 0, 64, 0, false, "")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(side, func(b *testing.B) { scoreLoop(b, m, side, reqs) })
		m.Close()
	}
}

// BenchmarkYesNoConcurrent runs BenchmarkYesNo's prefix-reuse workload on
// two goroutines at once, each with a model of its own, as two shard
// workers of the judge stage score at once (pipeline.parallelism 2): two
// pools whose threads all work at once, on 2 CPUs at 2 intra-op threads
// more threads than CPUs. An op is one call on each.
func BenchmarkYesNoConcurrent(b *testing.B) {
	dir, reqs := yesNoWorkload(b)
	ctx := context.Background()
	var g errgroup.Group
	ready, start := make(chan struct{}, 2), make(chan struct{})
	for range 2 {
		g.Go(func() error {
			m, err := load(dir, "", 0, 64, 0, false, "")
			if err != nil {
				ready <- struct{}{}
				return err
			}
			defer m.Close()
			if _, err := m.Score(ctx, reqs); err != nil { // warm-up
				ready <- struct{}{}
				return err
			}
			ready <- struct{}{}
			<-start
			for range b.N {
				if _, err := m.Score(ctx, reqs); err != nil {
					return err
				}
			}
			return nil
		})
	}
	<-ready
	<-ready
	b.ResetTimer()
	close(start)
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkYesNoShardWorkers runs BenchmarkYesNo's prefix-reuse workload
// in the judge stage's shape at parallelism 2: two goroutines (its shard
// workers) score on one model at once. Score calls take the engine one at a
// time either way; "callers" runs each on its caller's goroutine, so that
// both callers' threads keep a libgomp pool, and "one_thread" runs them on
// the model's engine goroutine (torchbe.Options.OneThread, what the judge
// stage asks for with more than one shard worker; docs/engine.md, "Threads
// and grad mode"). An op is one call on each goroutine.
func BenchmarkYesNoShardWorkers(b *testing.B) {
	dir, reqs := yesNoWorkload(b)
	for _, side := range []string{"callers", "one_thread"} {
		b.Run(side, func(b *testing.B) {
			m, err := torchbe.Load(torchbe.Options{Dir: dir, MaxBatch: 64, OneThread: side == "one_thread"})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			if _, err := m.Score(ctx, reqs); err != nil { // warm-up
				b.Fatal(err)
			}
			b.ResetTimer()
			var g errgroup.Group
			for range 2 {
				g.Go(func() error {
					for range b.N {
						if _, err := m.Score(ctx, reqs); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// yesNoWorkload writes the YesNo benchmarks' tiny random checkpoint and
// returns its directory and their requests: one (response, rubric) request
// of 4 criteria over a 300-word response.
func yesNoWorkload(b *testing.B) (string, []backend.ScoreRequest) {
	dir := b.TempDir()
	if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: 1, OutDir: dir}); err != nil {
		b.Fatal(err)
	}
	reqs, err := workload(shape{responses: 1, rubrics: 1, responseWords: 300, criteria: 4})
	if err != nil {
		b.Fatal(err)
	}
	return dir, reqs
}

// scoreLoop times one side of the YesNo benchmarks: m's Score
// ("prefix_reuse") or ScoreNaive ("naive") over reqs, a call per op.
func scoreLoop(b *testing.B, m *torchbe.Model, side string, reqs []backend.ScoreRequest) {
	f := m.Score
	if side == "naive" {
		f = m.ScoreNaive
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := f(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSidesAgree checks, on a tiny random checkpoint, that prefix reuse and
// the naive side give the same log-probs within the benchmark's tolerance,
// among the candidates and over the vocabulary, with the criteria in one
// batch and split over batches of 3, and that maxDiff refuses a larger
// difference.
func TestSidesAgree(t *testing.T) {
	ctx := context.Background()
	for _, vocab := range []bool{false, true} {
		reqs, err := workload(shape{responses: 2, rubrics: 2, responseWords: 60, criteria: 5, vocab: vocab})
		if err != nil {
			t.Fatal(err)
		}
		for _, mb := range []int{64, 3} {
			m, err := load("", "tiny", 1, mb, 0, false, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			naive, err := m.ScoreNaive(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			reuse, err := m.Score(ctx, reqs)
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			d, err := maxDiff(naive, reuse, defaultTol)
			if err != nil {
				t.Fatalf("vocab %v, max batch %d: %v", vocab, mb, err)
			}
			t.Logf("vocab %v, max batch %d: max abs log-prob difference %.3g", vocab, mb, d)
			reuse[1].LogProbs[4][0] += 10 * defaultTol
			if _, err := maxDiff(naive, reuse, defaultTol); err == nil {
				t.Fatalf("vocab %v, max batch %d: maxDiff accepted a difference of %g", vocab, mb, 10*defaultTol)
			}
		}
	}
}

// TestWorkloadShape checks that the benchmark's requests share a real
// prefix: every suffix is one criterion of the yes/no prompt.
func TestWorkloadShape(t *testing.T) {
	reqs, err := workload(shape{responses: 2, rubrics: 1, responseWords: 10, criteria: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || len(reqs[0].Suffixes) != 3 || reqs[0].Prefix == "" || reqs[0].Prefix == reqs[1].Prefix {
		t.Fatalf("workload = %+v", reqs)
	}
	// -rubrics: the requests of one response are consecutive, share its
	// prefix and ask other criteria.
	reqs, err = workload(shape{responses: 2, rubrics: 3, responseWords: 10, criteria: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 6 {
		t.Fatalf("%d requests, want 6", len(reqs))
	}
	for i, r := range reqs {
		same := reqs[i/3*3]
		if r.Prefix != same.Prefix || (i%3 == 0 && i > 0 && r.Prefix == reqs[i-1].Prefix) {
			t.Errorf("request %d: prefix not shared with its response's requests only", i)
		}
		if i%3 > 0 && r.Suffixes[0] == reqs[i-1].Suffixes[0] {
			t.Errorf("request %d asks the same criterion as request %d", i, i-1)
		}
	}
}

// TestWorkloadQuestions checks -questions: consecutive responses answer one
// question with answers of their own, so their prefixes differ but begin
// alike through the question.
func TestWorkloadQuestions(t *testing.T) {
	reqs, err := workload(shape{responses: 4, questions: 2, rubrics: 1, questionWords: 5, responseWords: 10, criteria: 2})
	if err != nil {
		t.Fatal(err)
	}
	question := func(r backend.ScoreRequest) string {
		_, after, _ := strings.Cut(r.Prefix, "Question ")
		q, _, _ := strings.Cut(after, ":")
		return q
	}
	for i, want := range []string{"0", "0", "1", "1"} {
		if q := question(reqs[i]); q != want {
			t.Errorf("request %d answers question %q, want %q", i, q, want)
		}
		if i > 0 && reqs[i].Prefix == reqs[i-1].Prefix {
			t.Errorf("request %d has request %d's prefix: the answers must differ", i, i-1)
		}
	}
}

// TestTokens checks the token counts on a one-character-per-token encoder.
func TestTokens(t *testing.T) {
	enc := func(s string) []int {
		out := make([]int, len(s))
		for i := range s {
			out[i] = int(s[i])
		}
		return out
	}
	reqs := []backend.ScoreRequest{
		{Prefix: "pppp", Suffixes: []string{"Cxa", "Cyb"}}, // shares "pppp" + "C"
		{Prefix: "pppp", Suffixes: []string{"Dz"}},         // "pppp" + "D" (a lone suffix keeps 1 tail token)
		{Prefix: "qq", Suffixes: []string{"ab", "ac"}},
	}
	naive, reuse := tokens(enc, reqs)
	// naive: 7+7 + 6 + 4+4. reuse: "pppp" once; "C", then "xa" and "yb";
	// "D", then "z"; "qq", "a", then "b" and "c".
	if naive != 28 || reuse != 4+1+2+2+1+1+2+1+1+1 {
		t.Errorf("tokens = %d, %d; want 28, 16", naive, reuse)
	}
}

// TestPairs checks the two bounds the header prints on a hand-counted
// request, one token per byte: full prompts "abcd" and "abce" share "abc",
// of which "ab" is the Prefix.
func TestPairs(t *testing.T) {
	encode := func(s string) []int {
		ids := make([]int, len(s))
		for i := range s {
			ids[i] = int(s[i])
		}
		return ids
	}
	reqs := []backend.ScoreRequest{{ID: "1", Prefix: "ab", Suffixes: []string{"cd", "ce"}}}
	if n, r := tokens(encode, reqs); n != 8 || r != 5 {
		t.Errorf("tokens = %d, %d; want 8 (2 × 4), 5 (ab, c, d, e)", n, r)
	}
	// Naive: 2 × (1+2+3+4). Reuse: ab (1+2), c (3), d and e (4 each).
	if n, r := pairs(encode, reqs); n != 20 || r != 14 {
		t.Errorf("pairs = %d, %d; want 20, 14", n, r)
	}
	// A second request with the same Prefix reuses ab's prefill: naive
	// 2 × (1+2+3) more, reuse x and y (3 each).
	reqs = append(reqs, backend.ScoreRequest{ID: "2", Prefix: "ab", Suffixes: []string{"x", "y"}})
	if n, r := pairs(encode, reqs); n != 20+12 || r != 14+3+3 {
		t.Errorf("two requests: pairs = %d, %d; want 32, 20", n, r)
	}
}

// TestServedSidesAgree checks -serve's two sides on a tiny random
// checkpoint: through `evolm serve` with and without coalescing, the
// log-probs are the in-process Score's within the benchmark's tolerance.
func TestServedSidesAgree(t *testing.T) {
	ctx := context.Background()
	reqs, err := workload(shape{responses: 2, rubrics: 3, responseWords: 20, criteria: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := load("", "tiny", 1, 64, 0, false, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, err := m.Score(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, coalesce := range []int{1, 64} {
		score, stop, err := served(m, coalesce, len(reqs))
		if err != nil {
			t.Fatal(err)
		}
		got, err := score(ctx, reqs)
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := maxDiff(want, got, defaultTol); err != nil {
			t.Errorf("coalesce %d: %v", coalesce, err)
		}
	}
}
