package generate

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// TestChunkedPrefillEqualsWhole: prefilling left-padded prompts of
// different lengths a few positions at a time gives the tokens and log-probs
// of one whole prefill (which TestGreedyMatchesHF ties to transformers).
func TestChunkedPrefillEqualsWhole(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	var reqs []Request
	for i, p := range prompts {
		reqs = append(reqs, Request{Prompt: p, N: 2, Sampling: hot, MaxNewTokens: 12, Seed: uint64(i)},
			Request{Prompt: p, Sampling: sample.Params{}, MaxNewTokens: 12})
	}
	whole := gen(t, m, Options{}, reqs...)
	for _, chunk := range []int{1, 3, 5} {
		got := gen(t, m, Options{PrefillChunk: chunk}, reqs...)
		for i := range reqs {
			if diff := cmp.Diff(tokensOf(whole[i]), tokensOf(got[i])); diff != "" {
				t.Errorf("prefill chunk %d, request %d: tokens (-whole +chunked):\n%s", chunk, i, diff)
			}
			for j := range got[i] {
				if diff := cmp.Diff(whole[i][j].LogProbs, got[i][j].LogProbs, cmpopts.EquateApprox(0, 1e-4)); diff != "" {
					t.Errorf("prefill chunk %d, request %d sample %d: log-probs (-whole +chunked):\n%s", chunk, i, j, diff)
				}
			}
		}
	}
}

// TestSchedulerInterleaves: with a Scheduler, a short call that arrives
// while a long one decodes finishes first (turns alternate step by step),
// and both get exactly the samples they get alone.
func TestSchedulerInterleaves(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	long := Request{Prompt: prompts[4], N: 4, Sampling: hot, MaxNewTokens: 300, Seed: 3}
	short := Request{Prompt: prompts[1], N: 1, Sampling: hot, MaxNewTokens: 4, Seed: 5}
	wantLong, wantShort := gen(t, m, Options{}, long)[0], gen(t, m, Options{}, short)[0]

	sched := NewScheduler(0)
	g := New(m, letterDecoder{}, Options{Scheduler: sched})
	base := torch.Live()
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	run := func(name string, r Request, want []Sample) {
		defer wg.Done()
		got, err := g.Generate(context.Background(), []Request{r})
		if err != nil {
			t.Error(err)
			return
		}
		if diff := cmp.Diff(tokensOf(want), tokensOf(got[0])); diff != "" {
			t.Errorf("%s request interleaved vs alone (-alone +interleaved):\n%s", name, diff)
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}
	wg.Add(2)
	go run("long", long, wantLong)
	// Start the short call once the long one holds the engine.
	for {
		sched.mu.Lock()
		busy := sched.busy
		sched.mu.Unlock()
		if busy {
			break
		}
		runtime.Gosched()
	}
	go run("short", short, wantShort)
	wg.Wait()
	if diff := cmp.Diff([]string{"short", "long"}, order); diff != "" {
		t.Errorf("completion order (-want +got):\n%s", diff)
	}
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d, want %d", got, base)
	}
}

// TestMemoryBudget: a request whose estimate alone exceeds the budget is
// refused before any work; requests that fit one at a time are split into
// chunks that each fit and give the same samples.
func TestMemoryBudget(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	a := Request{Prompt: prompts[0], N: 2, Sampling: hot, MaxNewTokens: 16, Seed: 1}
	b := Request{Prompt: prompts[4], N: 3, Sampling: hot, MaxNewTokens: 16, Seed: 2}
	want := gen(t, m, Options{}, a, b)
	probe := New(m, letterDecoder{}, Options{})
	one := max(probe.EstimateBytes([]Request{a}), probe.EstimateBytes([]Request{b}))
	if both := probe.EstimateBytes([]Request{a, b}); both <= one {
		t.Fatalf("estimate of two requests %d not above one's %d", both, one)
	}
	got := gen(t, m, Options{Scheduler: NewScheduler(one)}, a, b)
	for i := range want {
		if diff := cmp.Diff(tokensOf(want[i]), tokensOf(got[i])); diff != "" {
			t.Errorf("request %d within a budget (-unbounded +budget):\n%s", i, diff)
		}
	}
	_, err := New(m, letterDecoder{}, Options{Scheduler: NewScheduler(one / 2)}).Generate(context.Background(), []Request{a, b})
	if err == nil || !strings.Contains(err.Error(), "over the budget") {
		t.Errorf("request over the budget: error %v, want one naming the budget", err)
	}
}

// TestTurnCancel: a caller whose context ends while it waits for a turn
// leaves the queue, and the turn goes on to the next waiter.
func TestTurnCancel(t *testing.T) {
	s := NewScheduler(0)
	done, err := s.Turn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Turn(ctx)
		errc <- err
	}()
	granted := make(chan func(), 1)
	go func() {
		waitQueued(s, 1) // the first waiter; then queue behind it
		d, err := s.Turn(context.Background())
		if err != nil {
			t.Error(err)
		}
		granted <- d
	}()
	waitQueued(s, 2)
	cancel()
	if err := <-errc; err == nil {
		t.Error("cancelled waiter got a turn")
	}
	done()
	(<-granted)()
	if s.busy || len(s.queue) != 0 {
		t.Errorf("scheduler left busy=%v with %d waiting", s.busy, len(s.queue))
	}
}

// TestGenerateEachDeliversEarly: in one call, a short request is delivered
// as soon as its rows end, before the long request beside it, outside any
// turn (its deliver callback can run another generation on the same
// scheduler), and every request gets the samples it gets alone.
func TestGenerateEachDeliversEarly(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	long := Request{Prompt: prompts[4], N: 4, Sampling: hot, MaxNewTokens: 200, Seed: 3}
	short := Request{Prompt: prompts[1], N: 2, Sampling: hot, MaxNewTokens: 4, Seed: 5}
	inner := Request{Prompt: prompts[0], Sampling: hot, MaxNewTokens: 3, Seed: 9}
	want := gen(t, m, Options{}, long, short, inner)

	g := New(m, letterDecoder{}, Options{Scheduler: NewScheduler(0)})
	base := torch.Live()
	var order []int
	got := make([][]Sample, 2)
	err := g.GenerateEach(context.Background(), []Request{long, short}, func(i int, s []Sample) {
		order = append(order, i)
		got[i] = s
		if i != 1 {
			return
		}
		in, err := g.Generate(context.Background(), []Request{inner}) // deadlocks if a turn were held
		if err != nil {
			t.Errorf("generation inside deliver: %v", err)
			return
		}
		if diff := cmp.Diff(tokensOf(want[2]), tokensOf(in[0])); diff != "" {
			t.Errorf("generation inside deliver vs alone (-alone +inside):\n%s", diff)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 0}, order); diff != "" {
		t.Errorf("delivery order (-want +got):\n%s", diff)
	}
	for i := range got {
		if diff := cmp.Diff(tokensOf(want[i]), tokensOf(got[i])); diff != "" {
			t.Errorf("request %d delivered vs alone (-alone +delivered):\n%s", i, diff)
		}
	}
	modeltest.CheckLeaks(t, base)
}

// waitQueued yields until n callers wait in s's queue.
func waitQueued(s *Scheduler, n int) {
	for {
		s.mu.Lock()
		q := len(s.queue)
		s.mu.Unlock()
		if q == n {
			return
		}
		runtime.Gosched()
	}
}
