package backend

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher coalesces concurrent Generate calls into larger calls of the
// Generator it wraps: requests that arrive while a batch runs are taken
// together by the next one, up to MaxBatch requests. At low load a call
// runs at once, alone, with no added wait; under load the engine sees full
// batches. `evolm serve` puts one in front of an engine that runs one call
// at a time, so that concurrent HTTP requests share forward passes.
//
// It keeps package backend's contract: callers' IDs need only be unique
// within their own call (the Batcher renames them inside a batch and
// restores them), a caller whose context ends returns at once with its
// error, and a batch is cancelled only when every caller in it has gone.
// When a coalesced call fails, the Batcher bisects: it retries each half
// on its own, so that one request that breaks the engine (or a batch too
// big for memory) fails only its own caller, at the cost of O(log n) extra
// calls. This relies on a row's result not depending on its batch, which
// the engines guarantee. An error of a single-request call goes to its
// caller; so does a panic of the generator, as an error.
// When the generator is an EachGenerator, each caller is answered as soon
// as its own request is done (a short request merged with a long one does
// not wait for it), and a failed call retries only the requests it had not
// answered.
// A Batcher starts goroutines only while it has work, so it needs no Close.
// A goroutine whose queue empties waits Linger for more before it ends, so
// that requests arriving one after another run on one goroutine: an engine
// keeps per-thread state warm on the goroutine's thread (libtorch's OpenMP
// pool, see model/torch's claimThread), which a new goroutine would build
// again.
type Batcher struct {
	// Linger is how long a batch goroutine with nothing queued waits for
	// more before it ends (NewBatcher: DefaultLinger; 0 ends at once).
	Linger time.Duration

	g          Generator
	maxBatch   int
	maxRunning int

	mu      sync.Mutex
	queue   []*batchItem
	running int           // batch goroutines, lingering ones included
	idle    int           // of which lingering
	wake    chan struct{} // wakes a lingering goroutine (buffered 1)
	seq     atomic.Uint64
}

// DefaultLinger is NewBatcher's Linger.
const DefaultLinger = 2 * time.Second

type batchItem struct {
	ctx  context.Context
	req  GenerateRequest
	done chan batchResult // buffered 1
}

type batchResult struct {
	resp GenerateResponse
	err  error
}

// NewBatcher wraps g. maxBatch is the most requests per call of g (at least
// 1); maxRunning is how many calls of g may run at once (at least 1; 1 for
// an engine that serializes calls anyway).
func NewBatcher(g Generator, maxBatch, maxRunning int) *Batcher {
	return &Batcher{g: g, maxBatch: max(maxBatch, 1), maxRunning: max(maxRunning, 1), Linger: DefaultLinger, wake: make(chan struct{}, 1)}
}

// Generate implements Generator.
func (b *Batcher) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	if err := CheckIDs(reqs, func(r *GenerateRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("batcher: %w", err)
	}
	items := make([]*batchItem, len(reqs))
	for i, r := range reqs {
		items[i] = &batchItem{ctx: ctx, req: r, done: make(chan batchResult, 1)}
	}
	b.mu.Lock()
	b.queue = append(b.queue, items...)
	switch {
	case b.idle > 0:
		select {
		case b.wake <- struct{}{}:
		default: // a wake-up is already on its way
		}
	case b.running < b.maxRunning:
		b.running++
		go b.loop()
	}
	b.mu.Unlock()
	out := make([]GenerateResponse, len(reqs))
	for i, it := range items {
		select {
		case r := <-it.done:
			if r.err != nil {
				return nil, r.err
			}
			out[i] = r.resp
		case <-ctx.Done():
			return nil, fmt.Errorf("batcher: %w", context.Cause(ctx))
		}
	}
	return out, nil
}

// Queued returns the number of requests waiting for a batch.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// loop runs batches until the queue has stayed empty for Linger.
func (b *Batcher) loop() {
	waited := false // the last wait for work ran out
	for {
		b.mu.Lock()
		var batch []*batchItem
		for len(b.queue) > 0 && len(batch) < b.maxBatch {
			it := b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
			if it.ctx.Err() == nil { // its caller has already returned
				batch = append(batch, it)
			}
		}
		if len(batch) == 0 {
			if waited || b.Linger <= 0 || b.wake == nil {
				b.running--
				b.mu.Unlock()
				return
			}
			b.idle++
			b.mu.Unlock()
			t := time.NewTimer(b.Linger)
			select {
			case <-b.wake:
				waited = false
			case <-t.C:
				waited = true
			}
			t.Stop()
			b.mu.Lock()
			b.idle--
			b.mu.Unlock()
			continue
		}
		b.mu.Unlock()
		waited = false
		b.run(batch)
	}
}

// run runs one batch, bisecting on failure.
func (b *Batcher) run(batch []*batchItem) {
	left, err := b.try(batch)
	if err == nil {
		return
	}
	if len(left) == 1 {
		left[0].done <- batchResult{err: err}
		return
	}
	var live []*batchItem
	for _, it := range left {
		if it.ctx.Err() == nil {
			live = append(live, it)
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		b.run(live)
		return
	}
	b.run(live[:len(live)/2])
	b.run(live[len(live)/2:])
}

// try calls the generator on batch and delivers each result, as soon as it
// is done when the generator is an EachGenerator. On failure it returns the
// items it did not deliver.
func (b *Batcher) try(batch []*batchItem) (undelivered []*batchItem, err error) {
	// The batch lives while any of its callers waits: a caller that got its
	// answer or went away no longer counts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, it := range batch {
		stops[i] = context.AfterFunc(it.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stops[i]()
	}
	reqs := make([]GenerateRequest, len(batch))
	byID := make(map[string]int, len(batch))
	for i, it := range batch {
		reqs[i] = it.req
		reqs[i].ID = "batch-" + strconv.FormatUint(b.seq.Add(1), 36)
		byID[reqs[i].ID] = i
	}
	var mu sync.Mutex // deliver may be called from the generator's goroutines
	delivered := make([]bool, len(batch))
	deliver := func(i int, r GenerateResponse) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case i < 0 || i >= len(batch):
			return fmt.Errorf("batcher: generator answered request %d of %d", i, len(batch))
		case r.ID != reqs[i].ID:
			return fmt.Errorf("batcher: response %d has id %q, want %q", i, r.ID, reqs[i].ID)
		case delivered[i]:
			return fmt.Errorf("batcher: generator answered request %d twice", i)
		}
		delivered[i] = true
		r.ID = batch[i].req.ID
		batch[i].done <- batchResult{resp: r}
		if stops[i]() && waiting.Add(-1) == 0 {
			cancel()
		}
		return nil
	}
	err = b.generate(ctx, reqs, deliver)
	mu.Lock()
	defer mu.Unlock()
	for i, it := range batch {
		if !delivered[i] {
			undelivered = append(undelivered, it)
			if err == nil {
				err = fmt.Errorf("batcher: generator gave no answer to request %d of %d", i, len(batch))
			}
		}
	}
	return undelivered, err
}

// generate calls the generator, through GenerateEach where it has it,
// turning a panic into an error: the batch runs on the Batcher's own
// goroutine, where an unrecovered panic would end the process, not one
// request.
func (b *Batcher) generate(ctx context.Context, reqs []GenerateRequest, deliver func(int, GenerateResponse) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batcher: generator panicked: %v\n%s", p, debug.Stack())
		}
	}()
	if eg, ok := b.g.(EachGenerator); ok {
		var (
			mu  sync.Mutex
			bad error // the first malformed answer
		)
		err := eg.GenerateEach(ctx, reqs, func(i int, r GenerateResponse) {
			if err := deliver(i, r); err != nil {
				mu.Lock()
				bad = cmp.Or(bad, err)
				mu.Unlock()
			}
		})
		mu.Lock()
		defer mu.Unlock()
		return cmp.Or(err, bad)
	}
	resps, err := b.g.Generate(ctx, reqs)
	if err != nil {
		return err
	}
	if len(resps) != len(reqs) {
		return fmt.Errorf("batcher: generator returned %d responses for %d requests", len(resps), len(reqs))
	}
	for i := range resps { // check every id before answering anyone
		if resps[i].ID != reqs[i].ID {
			return fmt.Errorf("batcher: response %d has id %q, want %q", i, resps[i].ID, reqs[i].ID)
		}
	}
	for i := range resps {
		if err := deliver(i, resps[i]); err != nil {
			return err
		}
	}
	return nil
}

var _ Generator = (*Batcher)(nil)
