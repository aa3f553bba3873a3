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
	coalescer[GenerateRequest, GenerateResponse]
}

// coalescer is the Batcher's machinery for any request type: it queues
// the requests of concurrent calls and runs them in batches through call,
// which answers request i of a batch with deliver(i, response).
type coalescer[Q, R any] struct {
	// Linger is how long a batch goroutine with nothing queued waits for
	// more before it ends (NewBatcher and NewScoreBatcher: DefaultLinger;
	// 0 ends at once).
	Linger time.Duration
	// Gather is how long a batch goroutine that had nothing to do (it just
	// started, or lingered) waits for more requests before its first call,
	// while fewer than maxBatch are queued (NewScoreBatcher: DefaultGather;
	// NewBatcher: 0, a call starts at once).
	Gather time.Duration

	what       string                                                                // "generator" or "scorer", in errors
	call       func(ctx context.Context, reqs []Q, deliver func(int, R) error) error // one batch
	reqID      func(*Q) *string
	resID      func(*R) *string
	maxBatch   int
	maxRunning int

	mu        sync.Mutex
	queue     []*batchItem[Q, R]
	running   int           // batch goroutines, lingering ones included
	idle      int           // of which lingering
	gathering int           // of which gathering (see Gather)
	wake      chan struct{} // wakes a lingering or gathering goroutine (buffered 1)
	seq       atomic.Uint64
}

// DefaultLinger is the Linger of NewBatcher and NewScoreBatcher.
const DefaultLinger = 2 * time.Second

// DefaultGather is the Gather of NewScoreBatcher: long enough for the rest
// of a burst of score requests sent at once (the judge stage sends a
// step's requests together) to arrive over loopback or a LAN, so that the
// first does not run alone and the requests about one response or one
// question share their prefill.
const DefaultGather = 2 * time.Millisecond

type batchItem[Q, R any] struct {
	ctx  context.Context
	req  Q
	done chan batchResult[R] // buffered 1
}

type batchResult[R any] struct {
	resp R
	err  error
}

// NewBatcher wraps g. maxBatch is the most requests per call of g (at least
// 1); maxRunning is how many calls of g may run at once (at least 1; 1 for
// an engine that serializes calls anyway).
func NewBatcher(g Generator, maxBatch, maxRunning int) *Batcher {
	b := &Batcher{}
	b.init("generator", maxBatch, maxRunning, func(ctx context.Context, reqs []GenerateRequest, deliver func(int, GenerateResponse) error) error {
		return b.generate(ctx, g, reqs, deliver)
	}, func(r *GenerateRequest) *string { return &r.ID }, func(r *GenerateResponse) *string { return &r.ID })
	return b
}

// init sets c up: what names the engine in errors, call runs one batch,
// and reqID and resID point at a request's and a response's ID.
func (c *coalescer[Q, R]) init(what string, maxBatch, maxRunning int, call func(context.Context, []Q, func(int, R) error) error, reqID func(*Q) *string, resID func(*R) *string) {
	c.what, c.call, c.reqID, c.resID = what, call, reqID, resID
	c.maxBatch, c.maxRunning = max(maxBatch, 1), max(maxRunning, 1)
	c.Linger, c.wake = DefaultLinger, make(chan struct{}, 1)
}

// Generate implements Generator.
func (b *Batcher) Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error) {
	return b.do(ctx, reqs)
}

// do queues reqs and waits for their answers.
func (c *coalescer[Q, R]) do(ctx context.Context, reqs []Q) ([]R, error) {
	if err := CheckIDs(reqs, func(r *Q) string { return *c.reqID(r) }); err != nil {
		return nil, fmt.Errorf("batcher: %w", err)
	}
	items := make([]*batchItem[Q, R], len(reqs))
	for i, r := range reqs {
		items[i] = &batchItem[Q, R]{ctx: ctx, req: r, done: make(chan batchResult[R], 1)}
	}
	c.mu.Lock()
	c.queue = append(c.queue, items...)
	switch {
	case c.idle > 0 || c.gathering > 0:
		select {
		case c.wake <- struct{}{}:
		default: // a wake-up is already on its way
		}
	case c.running < c.maxRunning:
		c.running++
		go c.loop()
	}
	c.mu.Unlock()
	out := make([]R, len(reqs))
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
func (c *coalescer[Q, R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// loop runs batches until the queue has stayed empty for Linger.
func (c *coalescer[Q, R]) loop() {
	waited := false // the last wait for work ran out
	gather := true  // the next batch is the first of a burst (see Gather)
	for {
		if gather {
			c.gather()
			gather = false
		}
		c.mu.Lock()
		var batch []*batchItem[Q, R]
		for len(c.queue) > 0 && len(batch) < c.maxBatch {
			it := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			if it.ctx.Err() == nil { // its caller has already returned
				batch = append(batch, it)
			}
		}
		if len(batch) == 0 {
			if waited || c.Linger <= 0 || c.wake == nil {
				c.running--
				c.mu.Unlock()
				return
			}
			c.idle++
			c.mu.Unlock()
			t := time.NewTimer(c.Linger)
			select {
			case <-c.wake:
				waited, gather = false, true
			case <-t.C:
				waited = true
			}
			t.Stop()
			c.mu.Lock()
			c.idle--
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		waited = false
		c.run(batch)
	}
}

// gather waits up to Gather for the queue to hold maxBatch requests.
func (c *coalescer[Q, R]) gather() {
	if c.Gather <= 0 || c.wake == nil {
		return
	}
	t := time.NewTimer(c.Gather)
	defer t.Stop()
	for {
		c.mu.Lock()
		if len(c.queue) >= c.maxBatch {
			c.mu.Unlock()
			return
		}
		c.gathering++
		c.mu.Unlock()
		var done bool
		select {
		case <-c.wake: // more queued: look again
		case <-t.C:
			done = true
		}
		c.mu.Lock()
		c.gathering--
		c.mu.Unlock()
		if done {
			return
		}
	}
}

// run runs one batch, bisecting on failure.
func (c *coalescer[Q, R]) run(batch []*batchItem[Q, R]) {
	left, err := c.try(batch)
	if err == nil {
		return
	}
	if len(left) == 1 {
		left[0].done <- batchResult[R]{err: err}
		return
	}
	var live []*batchItem[Q, R]
	for _, it := range left {
		if it.ctx.Err() == nil {
			live = append(live, it)
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		c.run(live)
		return
	}
	c.run(live[:len(live)/2])
	c.run(live[len(live)/2:])
}

// try calls c.call on batch and delivers each result as soon as it is
// given. On failure it returns the items it did not deliver.
func (c *coalescer[Q, R]) try(batch []*batchItem[Q, R]) (undelivered []*batchItem[Q, R], err error) {
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
	reqs := make([]Q, len(batch))
	for i, it := range batch {
		reqs[i] = it.req
		*c.reqID(&reqs[i]) = "batch-" + strconv.FormatUint(c.seq.Add(1), 36)
	}
	var mu sync.Mutex // deliver may be called from the engine's goroutines
	delivered := make([]bool, len(batch))
	deliver := func(i int, r R) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case i < 0 || i >= len(batch):
			return fmt.Errorf("batcher: %s answered request %d of %d", c.what, i, len(batch))
		case *c.resID(&r) != *c.reqID(&reqs[i]):
			return fmt.Errorf("batcher: response %d has id %q, want %q", i, *c.resID(&r), *c.reqID(&reqs[i]))
		case delivered[i]:
			return fmt.Errorf("batcher: %s answered request %d twice", c.what, i)
		}
		delivered[i] = true
		*c.resID(&r) = *c.reqID(&batch[i].req)
		batch[i].done <- batchResult[R]{resp: r}
		if stops[i]() && waiting.Add(-1) == 0 {
			cancel()
		}
		return nil
	}
	err = c.safeCall(ctx, reqs, deliver)
	mu.Lock()
	defer mu.Unlock()
	for i, it := range batch {
		if !delivered[i] {
			undelivered = append(undelivered, it)
			if err == nil {
				err = fmt.Errorf("batcher: %s gave no answer to request %d of %d", c.what, i, len(batch))
			}
		}
	}
	return undelivered, err
}

// safeCall runs c.call, turning a panic into an error: the batch runs on
// the coalescer's own goroutine, where an unrecovered panic would end the
// process, not one request.
func (c *coalescer[Q, R]) safeCall(ctx context.Context, reqs []Q, deliver func(int, R) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batcher: %s panicked: %v\n%s", c.what, p, debug.Stack())
		}
	}()
	return c.call(ctx, reqs, deliver)
}

// generate answers reqs through g, through GenerateEach where it has it
// (each request answered as soon as it is done).
func (b *Batcher) generate(ctx context.Context, g Generator, reqs []GenerateRequest, deliver func(int, GenerateResponse) error) error {
	if eg, ok := g.(EachGenerator); ok {
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
	resps, err := g.Generate(ctx, reqs)
	if err != nil {
		return err
	}
	return b.deliverAll(reqs, resps, deliver)
}

// deliverAll checks that a whole call's responses answer reqs in order,
// every id before anyone is answered, and delivers them.
func (c *coalescer[Q, R]) deliverAll(reqs []Q, resps []R, deliver func(int, R) error) error {
	if len(resps) != len(reqs) {
		return fmt.Errorf("batcher: %s returned %d responses for %d requests", c.what, len(resps), len(reqs))
	}
	for i := range resps {
		if got, want := *c.resID(&resps[i]), *c.reqID(&reqs[i]); got != want {
			return fmt.Errorf("batcher: %s's response %d of its call has id %q, want %q", c.what, i, got, want)
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
