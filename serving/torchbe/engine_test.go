package torchbe

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// TestOneThread: with Options.OneThread, Score, ScoreNaive and LogProbs
// called from several goroutines at once answer as without it, and run off
// their callers' threads (no caller's thread enters libtorch, so none keeps
// a libgomp pool); a canceled call fails with its context's error; after
// Close they fail.
func TestOneThread(t *testing.T) {
	plain, one := oneThreadPair(t, 7)
	ctx := context.Background()
	sreq := []backend.ScoreRequest{
		{ID: "a", Prefix: "Is the sky blue? It is.", Suffixes: []string{" Correct?", " Polite?"}, Candidates: []string{" yes", " no"}},
		{ID: "b", Prefix: "Is grass red? No.", Suffixes: []string{" Correct?"}, Candidates: []string{" yes", " no"}},
	}
	lreq := []backend.LogProbRequest{{ID: "l", Prompt: "Hello", Completion: " there, friend"}}
	seed := int64(11)
	greq := []backend.GenerateRequest{
		{ID: "g", Prompt: "Once upon a time", N: 2, LogProbs: true, Sampling: backend.Sampling{MaxTokens: 12, Temperature: 1, Seed: &seed}},
		{ID: "h", Prompt: "The sea", Sampling: backend.Sampling{MaxTokens: 5}},
	}
	wantGen := noErr(plain.Generate(ctx, greq))(t)
	wantScore := noErr(plain.Score(ctx, sreq))(t)
	wantNaive := noErr(plain.ScoreNaive(ctx, sreq))(t)
	wantLP := noErr(plain.LogProbs(ctx, lreq))(t)
	var g errgroup.Group
	for range 3 {
		g.Go(func() error {
			runtime.LockOSThread() // so that ThreadClaimed asks about this goroutine's thread
			defer runtime.UnlockOSThread()
			for range 4 {
				for _, c := range []struct {
					name string
					want any
					call func() (any, error)
				}{
					{"Score", wantScore, func() (any, error) { return one.Score(ctx, sreq) }},
					{"ScoreNaive", wantNaive, func() (any, error) { return one.ScoreNaive(ctx, sreq) }},
					{"LogProbs", wantLP, func() (any, error) { return one.LogProbs(ctx, lreq) }},
					{"Generate", wantGen, func() (any, error) { return one.Generate(ctx, greq) }},
				} {
					got, err := c.call()
					if err != nil {
						return err
					}
					if d := cmp.Diff(c.want, got); d != "" {
						t.Errorf("%s on the engine thread differs (-want +got):\n%s", c.name, d)
					}
				}
			}
			if torch.ThreadClaimed() {
				t.Error("a caller's thread entered libtorch")
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := one.Score(canceled, sreq); !errors.Is(err, context.Canceled) {
		t.Fatalf("Score with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := one.Generate(canceled, greq); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate with a canceled context: %v, want context.Canceled", err)
	}
	one.Close()
	if _, err := one.Score(ctx, sreq); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Score after Close: %v, want an error saying the model is closed", err)
	}
	if _, err := one.Generate(ctx, greq); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Generate after Close: %v, want an error saying the model is closed", err)
	}
}

// TestOneThreadInterleaves: generations on the engine thread still take
// the engine step by step. A short generation that arrives while a long one
// runs ends first, a score call made meanwhile is answered before the long
// one ends, and each answers as alone on a plain model. A generation
// canceled while it runs fails with its context's error and the engine goes
// on; Close while one runs ends it with an error and returns.
func TestOneThreadInterleaves(t *testing.T) {
	plain, one := oneThreadPair(t, 5)
	ctx := context.Background()
	s1, s2 := int64(3), int64(5)
	long := []backend.GenerateRequest{{ID: "long", Prompt: "Tell me a long story", N: 4, Sampling: backend.Sampling{MaxTokens: 300, Temperature: 1, Seed: &s1}}}
	short := []backend.GenerateRequest{{ID: "short", Prompt: "Hi", Sampling: backend.Sampling{MaxTokens: 4, Temperature: 1, Seed: &s2}}}
	sreq := []backend.ScoreRequest{{ID: "a", Prefix: "Is the sky blue? It is.", Suffixes: []string{" Correct?"}, Candidates: []string{" yes", " no"}}}
	wantLong := noErr(plain.Generate(ctx, long))(t)
	wantShort := noErr(plain.Generate(ctx, short))(t)
	wantScore := noErr(plain.Score(ctx, sreq))(t)
	if n := len(wantLong[0].Completions[0].TokenIDs); n < 100 {
		t.Fatalf("the long generation alone made %d tokens; the test needs it long", n)
	}

	var mu sync.Mutex
	var order []string // the calls, as they ended
	// call runs one call on the engine thread once the loop has taken the
	// calls before it (after), and compares its answer with want.
	call := func(name string, after int64, want any, f func() (any, error)) func() error {
		return func() error {
			for one.engine.taken.Load() < after {
				runtime.Gosched()
			}
			got, err := f()
			if err != nil {
				return err
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s on the engine thread among the others vs alone (-alone +among):\n%s", name, d)
			}
			return nil
		}
	}
	var g errgroup.Group
	g.Go(call("long generation", 0, wantLong, func() (any, error) { return one.Generate(ctx, long) }))
	g.Go(call("short generation", 1, wantShort, func() (any, error) { return one.Generate(ctx, short) }))
	g.Go(call("score", 1, wantScore, func() (any, error) { return one.Score(ctx, sreq) }))
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if order[len(order)-1] != "long generation" {
		t.Errorf("calls in the order they ended: %v; the long generation should end last", order)
	}

	// A generation whose context ends while it runs fails with the
	// context's error, and the engine goes on.
	cctx, cancel := context.WithCancel(ctx)
	canceled := make(chan error, 1)
	taken := one.engine.taken.Load()
	go func() {
		_, err := one.Generate(cctx, long)
		canceled <- err
	}()
	for one.engine.taken.Load() == taken {
		runtime.Gosched()
	}
	cancel()
	if err := <-canceled; !errors.Is(err, context.Canceled) {
		t.Errorf("a generation whose context was canceled: %v, want context.Canceled", err)
	}
	if got := noErr(one.Score(ctx, sreq))(t); !cmp.Equal(wantScore, got) {
		t.Errorf("score after a canceled generation differs from the plain model's")
	}

	// Close while a generation runs: it fails, and Close returns.
	failed := make(chan error, 1)
	taken = one.engine.taken.Load()
	go func() {
		_, err := one.Generate(ctx, long)
		failed <- err
	}()
	for one.engine.taken.Load() == taken {
		runtime.Gosched()
	}
	one.Close()
	if err := <-failed; err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a generation cut short by Close: %v, want an error saying the model is closed", err)
	}
}

// TestOneThreadCoroutinesKeepTheirGradMode: generations on the engine
// thread each keep their own grad mode, which is thread-local, across their
// yields. Here the first to start ends first: it restores the mode it
// found (on) while the second still runs with the mode it set (off), as a
// generation sets it for its whole run. Shared, the second would go on
// with grad on, off the fused decoder stack, and its log-probs would differ
// in the last bits from the same generation alone.
func TestOneThreadCoroutinesKeepTheirGradMode(t *testing.T) {
	_, one := oneThreadPair(t, 9)
	ctx := context.Background()
	body := func(turns int) func(func(int, struct{})) error {
		return func(func(int, struct{})) error {
			defer torch.SetGrad(false)()
			turn := func() error { // yields to the other first
				done, err := one.sched.Turn(ctx)
				if err == nil {
					done()
				}
				return err
			}
			for one.engine.taken.Load() < 2 { // both on the engine
				if err := turn(); err != nil {
					return err
				}
			}
			for i := range turns {
				if err := turn(); err != nil {
					return err
				}
				if torch.GradEnabled() {
					return fmt.Errorf("turn %d of %d: grad mode on, though this generation set it off", i+1, turns)
				}
			}
			return nil
		}
	}
	var g errgroup.Group
	g.Go(func() error { return generateOnEngine(ctx, one, body(2), func(int, struct{}) {}) })
	for one.engine.taken.Load() < 1 {
		runtime.Gosched()
	}
	g.Go(func() error { return generateOnEngine(ctx, one, body(6), func(int, struct{}) {}) })
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := noErr(onEngine(ctx, one, func() (bool, error) { return torch.GradEnabled(), nil }))(t); !got {
		t.Error("the engine thread's own grad mode is off after the generations; want on, as they found it")
	}
}

// oneThreadPair loads a tiny random checkpoint twice at 1 thread, plain and
// with OneThread; both close when the test ends.
func oneThreadPair(t *testing.T, seed int64) (plain, one *Model) {
	t.Helper()
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, seed)
	load := func(oneThread bool) *Model {
		m, err := Load(Options{Dir: dir, ModelID: "tiny", Threads: 1, OneThread: oneThread})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	return load(false), load(true)
}

// noErr(f(…))(t) is f's value, or fails the test with f's error.
func noErr[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// BenchmarkGenerateShardWorkers has two goroutines generate on one model at
// once, as a rollout stage's two shard workers at parallelism 2 (an op is
// one call on each: 4 prompts × 8 samples of up to 32 tokens), with the
// calls run on their callers' threads (callers) and on the model's engine
// thread (one_thread, Options.OneThread); one_goroutine makes the same two
// calls one after the other from one goroutine, on its thread. Each
// sub-benchmark loads its model and closes it, and every call is made from
// a goroutine that then ends, so that no thread left by another keeps a
// libgomp pool (docs/engine.md, "Threads and grad mode"):
//
//	go test -run '^$' -bench GenerateShardWorkers -benchtime 5x ./serving/torchbe
func BenchmarkGenerateShardWorkers(b *testing.B) {
	for _, preset := range []string{"tiny", "small"} {
		dir := b.TempDir()
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: preset, Seed: 1, OutDir: dir}); err != nil {
			b.Fatal(err)
		}
		reqs := func(worker int) []backend.GenerateRequest {
			rs := make([]backend.GenerateRequest, 4)
			for i := range rs {
				seed := int64(i)
				rs[i] = backend.GenerateRequest{ID: fmt.Sprint(worker, "/", i), Prompt: fmt.Sprintf("Write a sentence about the sea, number %d.", i), N: 8,
					Sampling: backend.Sampling{MaxTokens: 32, Temperature: 1, Seed: &seed}}
			}
			return rs
		}
		for _, mode := range []string{"one_goroutine", "callers", "one_thread"} {
			b.Run(preset+"/"+mode, func(b *testing.B) {
				m, err := Load(Options{Dir: dir, ModelID: preset, OneThread: mode == "one_thread"})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				ctx := context.Background()
				for b.Loop() {
					var g errgroup.Group
					if mode == "one_goroutine" {
						g.Go(func() error {
							for w := range 2 {
								if _, err := m.Generate(ctx, reqs(w)); err != nil {
									return err
								}
							}
							return nil
						})
					} else {
						for w := range 2 {
							g.Go(func() error { _, err := m.Generate(ctx, reqs(w)); return err })
						}
					}
					if err := g.Wait(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
