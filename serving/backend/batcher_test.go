package backend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gateGenerator is a test double that records each call's prompts and,
// while gate is open, blocks the first call until released.
type gateGenerator struct {
	mu      sync.Mutex
	calls   [][]string
	entered chan struct{}
	release chan struct{}
	fail    error
	poison  string // a call holding a request with this prompt fails
}

// sizes are the numbers of requests of the calls so far, in order.
func (g *gateGenerator) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sizes []int
	for _, c := range g.calls {
		sizes = append(sizes, len(c))
	}
	return sizes
}

// enter records a call's prompts and, for the first call while the gate
// is set, blocks until released.
func (g *gateGenerator) enter(reqs []GenerateRequest) {
	g.mu.Lock()
	first := len(g.calls) == 0
	var prompts []string
	for _, r := range reqs {
		prompts = append(prompts, r.Prompt)
	}
	g.calls = append(g.calls, prompts)
	g.mu.Unlock()
	if first && g.entered != nil {
		g.entered <- struct{}{}
		<-g.release
	}
}

func (g *gateGenerator) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	g.enter(reqs)
	if g.fail != nil {
		return nil, g.fail
	}
	for _, r := range reqs {
		if g.poison != "" && r.Prompt == g.poison {
			return nil, fmt.Errorf("engine broke on %q", r.Prompt)
		}
	}
	out := make([]GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = GenerateResponse{ID: r.ID, Completions: []Completion{{Text: "re: " + r.Prompt}}}
	}
	return out, nil
}

func req(id, prompt string) GenerateRequest {
	return GenerateRequest{ID: id, Prompt: prompt, Sampling: Sampling{MaxTokens: 1}}
}

func TestBatcherCoalescesQueuedCalls(t *testing.T) {
	g := &gateGenerator{entered: make(chan struct{}), release: make(chan struct{})}
	b := NewBatcher(g, 4, 1)
	ctx := context.Background()

	type res struct {
		resps []GenerateResponse
		err   error
	}
	first := make(chan res, 1)
	go func() {
		r, err := b.Generate(ctx, []GenerateRequest{req("x", "first")})
		first <- res{r, err}
	}()
	<-g.entered // the first batch is running; the next calls queue

	results := make([]chan res, 6)
	for i := range results {
		results[i] = make(chan res, 1)
		go func() {
			// Every caller uses the same ID: IDs are per call.
			r, err := b.Generate(ctx, []GenerateRequest{req("x", fmt.Sprint("p", i))})
			results[i] <- res{r, err}
		}()
	}
	for b.Queued() < 6 {
		// Wait until all six are queued; the test has no timing assumptions.
		runtime.Gosched()
	}
	close(g.release)

	if r := <-first; r.err != nil || r.resps[0].ID != "x" || r.resps[0].Completions[0].Text != "re: first" {
		t.Fatalf("first call: %+v", r)
	}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		want := []GenerateResponse{{ID: "x", Completions: []Completion{{Text: fmt.Sprint("re: p", i)}}}}
		if diff := cmp.Diff(want, r.resps); diff != "" {
			t.Errorf("call %d (-want +got):\n%s", i, diff)
		}
	}
	if diff := cmp.Diff([]int{1, 4, 2}, g.sizes()); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
}

func TestBatcherBisectsAroundAPoisonRequest(t *testing.T) {
	g := &gateGenerator{entered: make(chan struct{}), release: make(chan struct{}), poison: "p5"}
	b := NewBatcher(g, 8, 1)
	ctx := context.Background()
	go b.Generate(ctx, []GenerateRequest{req("warm", "warm")})
	<-g.entered
	errs := make([]chan error, 8)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() {
			r, err := b.Generate(ctx, []GenerateRequest{req("x", fmt.Sprint("p", i))})
			if err == nil && r[0].Completions[0].Text != fmt.Sprint("re: p", i) {
				err = fmt.Errorf("wrong answer %+v", r)
			}
			errs[i] <- err
		}()
	}
	for b.Queued() < 8 {
		runtime.Gosched()
	}
	close(g.release)
	wantOnlyPoisonFails(t, errs, 5, "p5")
	sizes := g.sizes()
	// warm, the batch of 8, then halves down to the poison request, in an
	// order that depends on the queue's.
	slices.Sort(sizes)
	if diff := cmp.Diff([]int{1, 1, 1, 2, 2, 4, 4, 8}, sizes); diff != "" {
		t.Errorf("call sizes (-want +got):\n%s", diff)
	}
}

func TestBatcherErrorsAndCancel(t *testing.T) {
	boom := errors.New("engine down")
	b := NewBatcher(&gateGenerator{fail: boom}, 8, 1)
	if _, err := b.Generate(context.Background(), []GenerateRequest{req("a", "p"), req("b", "q")}); !errors.Is(err, boom) {
		t.Errorf("err = %v, want the generator's error", err)
	}
	if _, err := b.Generate(context.Background(), []GenerateRequest{req("a", "p"), req("a", "q")}); err == nil {
		t.Errorf("duplicate ids within a call: want an error")
	}

	g := &gateGenerator{entered: make(chan struct{}), release: make(chan struct{})}
	b = NewBatcher(g, 8, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Generate(ctx, []GenerateRequest{req("a", "p")})
		errc <- err
	}()
	<-g.entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: err = %v, want context.Canceled", err)
	}
	close(g.release)
	// The batcher still serves later callers.
	if r, err := b.Generate(context.Background(), []GenerateRequest{req("b", "later")}); err != nil || r[0].Completions[0].Text != "re: later" {
		t.Errorf("after cancel: %+v, %v", r, err)
	}
}

// panicGenerator is a test double whose calls panic when they hold the
// poison prompt.
type panicGenerator struct{ gateGenerator }

func (g *panicGenerator) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	for _, r := range reqs {
		if r.Prompt == "poison" {
			var m map[string]int
			m["x"]++ // a nil-map write: a runtime panic, as gotch's nil-tensor dereference
		}
	}
	return g.gateGenerator.Generate(ctx, reqs)
}

// TestBatcherRecoversAPanic: a generator that panics on one request fails
// that request with an error; the process lives, the other requests of the
// batch get their answers, and the Batcher keeps serving.
func TestBatcherRecoversAPanic(t *testing.T) {
	g := &panicGenerator{}
	b := NewBatcher(g, 8, 1)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, p := range []string{"a", "poison", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Generate(context.Background(), []GenerateRequest{req("r", p)})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("healthy requests failed: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "panicked") {
		t.Errorf("poison request: error %v, want a panic turned into an error", errs[1])
	}
	out, err := b.Generate(context.Background(), []GenerateRequest{req("r", "after")})
	if err != nil || out[0].Completions[0].Text != "re: after" {
		t.Errorf("after the panic: %+v, %v", out, err)
	}
}

// eachGate is a test double EachGenerator: the first call blocks as
// gateGenerator's does; every call answers its requests in order, except
// the prompt "slow", answered last once hold is closed, and fails at the
// poison prompt (having answered the requests before it).
type eachGate struct {
	*gateGenerator
	hold chan struct{}
}

func (g *eachGate) GenerateEach(ctx context.Context, reqs []GenerateRequest, deliver func(int, GenerateResponse)) error {
	g.enter(reqs)
	slow := -1
	for i, r := range reqs {
		switch r.Prompt {
		case "slow":
			slow = i
			continue
		case g.poison:
			return fmt.Errorf("engine broke on %q", r.Prompt)
		}
		deliver(i, GenerateResponse{ID: r.ID, Completions: []Completion{{Text: "re: " + r.Prompt}}})
	}
	if slow >= 0 {
		<-g.hold
		deliver(slow, GenerateResponse{ID: reqs[slow].ID, Completions: []Completion{{Text: "re: slow"}}})
	}
	return nil
}

// Generate answers all requests at once, when GenerateEach is done.
func (g *eachGate) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	out := make([]GenerateResponse, len(reqs))
	err := g.GenerateEach(ctx, reqs, func(i int, r GenerateResponse) { out[i] = r })
	return out, err
}

// parkAndQueue starts a call that holds g's first batch, then the calls of
// prompts, in order, and returns their results once all are queued behind
// it.
func parkAndQueue(t *testing.T, b *Batcher, g *eachGate, prompts ...string) []chan error {
	t.Helper()
	go b.Generate(context.Background(), []GenerateRequest{req("park", "park")})
	<-g.entered
	errs := make([]chan error, len(prompts))
	for i, p := range prompts {
		errs[i] = make(chan error, 1)
		go func() {
			r, err := b.Generate(context.Background(), []GenerateRequest{req("x", p)})
			if err == nil && r[0].Completions[0].Text != "re: "+p {
				err = fmt.Errorf("wrong answer %+v", r)
			}
			errs[i] <- err
		}()
		for b.Queued() < i+1 { // queued in order
			runtime.Gosched()
		}
	}
	close(g.release)
	return errs
}

// TestBatcherAnswersEachWhenDone: with an EachGenerator, a caller whose
// request is merged with a slow one is answered while the slow one runs.
func TestBatcherAnswersEachWhenDone(t *testing.T) {
	g := &eachGate{gateGenerator: &gateGenerator{entered: make(chan struct{}), release: make(chan struct{})}, hold: make(chan struct{})}
	b := NewBatcher(g, 4, 1)
	errs := parkAndQueue(t, b, g, "slow", "quick")
	if err := <-errs[1]; err != nil { // returns while "slow" is held
		t.Fatalf("quick request: %v", err)
	}
	close(g.hold)
	if err := <-errs[0]; err != nil {
		t.Fatalf("slow request: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if diff := cmp.Diff([][]string{{"park"}, {"slow", "quick"}}, g.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestBatcherRetriesOnlyUnanswered: when an EachGenerator call fails after
// answering some requests, only the others are retried (bisected), and only
// the poison request fails.
func TestBatcherRetriesOnlyUnanswered(t *testing.T) {
	g := &eachGate{gateGenerator: &gateGenerator{entered: make(chan struct{}), release: make(chan struct{}), poison: "bad"}}
	b := NewBatcher(g, 4, 1)
	errs := parkAndQueue(t, b, g, "a", "bad", "c")
	wantOnlyPoisonFails(t, errs, 1, "bad")
	g.mu.Lock()
	defer g.mu.Unlock()
	if diff := cmp.Diff([][]string{{"park"}, {"a", "bad", "c"}, {"bad"}, {"c"}}, g.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// wantOnlyPoisonFails reads every caller's result: request poison (whose
// prompt is prompt) must fail with the engine's error, every other succeed.
func wantOnlyPoisonFails(t *testing.T, errs []chan error, poison int, prompt string) {
	t.Helper()
	for i, ch := range errs {
		err := <-ch
		if i == poison && (err == nil || err.Error() != fmt.Sprintf("engine broke on %q", prompt)) {
			t.Errorf("poison request: err = %v, want the engine's error", err)
		}
		if i != poison && err != nil {
			t.Errorf("request %d: %v; only the poison request may fail", i, err)
		}
	}
}

// goroutineGenerator is a test double that records the goroutine each call
// runs on (from runtime.Stack's header; ids are never reused).
type goroutineGenerator struct {
	mu  sync.Mutex
	ids []string
}

func (g *goroutineGenerator) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	buf := make([]byte, 64)
	id := strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1]
	g.mu.Lock()
	g.ids = append(g.ids, id)
	g.mu.Unlock()
	out := make([]GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = GenerateResponse{ID: r.ID}
	}
	return out, nil
}

// TestBatcherLingers: calls made one after another run on one goroutine
// while each comes within Linger of the last (an engine's per-thread state
// stays warm on it), and the goroutine ends once Linger passes with nothing
// queued. (Without Linger most of them start a goroutine of their own.)
func TestBatcherLingers(t *testing.T) {
	g := &goroutineGenerator{}
	b := NewBatcher(g, 8, 1)
	b.Linger = time.Minute
	for i := range 5 {
		if _, err := b.Generate(context.Background(), []GenerateRequest{{ID: fmt.Sprint(i), Prompt: "p"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // long enough for the goroutine to go idle
	}
	if !slices.Equal(g.ids, slices.Repeat(g.ids[:1], 5)) {
		t.Errorf("5 calls ran on goroutines %v, want one", g.ids)
	}
	g = &goroutineGenerator{}
	b = NewBatcher(g, 8, 1)
	b.Linger = 10 * time.Millisecond
	if _, err := b.Generate(context.Background(), []GenerateRequest{{ID: "a", Prompt: "p"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		b.mu.Lock()
		running := b.running
		b.mu.Unlock()
		if running == 0 {
			break
		}
		if i == 1000 {
			t.Fatalf("%d batch goroutines 10 s after a linger of 10 ms", running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
