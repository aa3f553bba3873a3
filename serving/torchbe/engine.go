package torchbe

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/evolm/evolm/model/torch"
)

// engineThread runs every engine call of a Model whose Options.OneThread is
// set on one goroutine, and so on one OS thread: the calls come from several
// goroutines (a stage's shard workers, a server's connections) but take the
// engine one at a time anyway (a scheduler turn each). Run from their
// callers' goroutines, each caller's thread would keep a libgomp worker pool
// of its own, and once the pools' threads outnumber the CPUs libgomp
// throttles every op of every pool: two shard workers at 2 intra-op threads
// on 2 CPUs ran the judge stage 3× slower than one (docs/engine.md,
// "Threads and grad mode").
//
// Score, ScoreNaive and LogProbs run on it as plain calls, one after the
// other. A generation runs as a coroutine of the engine goroutine
// (iter.Pull), so on its thread too, and yields wherever the scheduler
// would hand the engine on: at each turn (a prefill chunk, a decode step)
// and while it waits for memory budget (generate.Scheduler.SetYield). The
// loop resumes the calls in the order they yielded or arrived, so
// concurrent generations still interleave step by step, and a score call
// waits for one step, not for a whole generation. A generation's
// answers are handed to its caller's goroutine, which runs the caller's
// deliver: the engine goroutine never blocks on a caller.
type engineThread struct {
	work chan *engineCall
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the loop has ended
	once sync.Once
	cur  *engineCall // the coroutine running now; read and written by the loop's goroutine alone

	taken atomic.Int64 // calls the loop has taken (for tests)
}

// engineCall is one call on the engine goroutine.
type engineCall struct {
	run  func()      // the call (a coroutine's body)
	fail func(error) // ends a call that never ran, when the engine stops first
	coro bool        // run as a coroutine that may yield

	next  func() (struct{}, bool) // the coroutine, once started
	stop  func()
	yield func(struct{}) bool
	grad  bool // the coroutine's grad mode while it is switched out
}

func newEngineThread() *engineThread {
	e := &engineThread{work: make(chan *engineCall), quit: make(chan struct{}), done: make(chan struct{})}
	go e.loop()
	return e
}

var errEngineClosed = errors.New("model is closed")

// loop runs the calls, each until it returns or yields, in the order they
// arrived or yielded.
func (e *engineThread) loop() {
	defer close(e.done)
	// A coroutine must switch with the lock count it was created with, so
	// the permanent lock of the thread's claim is taken here, before any
	// (torch.ClaimThread).
	torch.ClaimThread()
	var runq []*engineCall
	take := func(c *engineCall) {
		e.taken.Add(1)
		runq = append(runq, c)
	}
	// drain queues the calls that have arrived; false once the engine
	// stops.
	drain := func() bool {
		for {
			select {
			case c := <-e.work:
				take(c)
			case <-e.quit:
				return false
			default:
				return true
			}
		}
	}
	for drain() {
		if len(runq) == 0 {
			select {
			case c := <-e.work:
				take(c)
			case <-e.quit:
			}
			continue // drain again: the engine may have stopped
		}
		c := runq[0]
		runq[0] = nil
		runq = runq[1:]
		if !c.coro {
			c.run()
			continue
		}
		if e.resume(c) {
			// Behind the calls that arrived while it ran: drain first.
			ok := drain()
			runq = append(runq, c)
			if !ok {
				break
			}
		}
	}
	// Stopped: a coroutine that has run is resumed with its yield failing,
	// so that it unwinds through its own defers on this thread; the other
	// calls fail without running.
	for _, c := range runq {
		if c.next != nil {
			e.inMode(c, c.stop)
		} else {
			c.fail(errEngineClosed)
		}
	}
}

// resume starts coroutine c or resumes it, and runs it until it yields
// (true) or returns (false).
func (e *engineThread) resume(c *engineCall) (yielded bool) {
	if c.next == nil {
		c.next, c.stop = iter.Pull(func(yield func(struct{}) bool) {
			c.yield = yield
			c.run()
		})
		c.grad = torch.GradEnabled() // as a thread of its own would start
	}
	e.inMode(c, func() {
		e.cur = c
		_, yielded = c.next()
		e.cur = nil
	})
	return yielded
}

// inMode runs f, which switches to coroutine c, with the thread's grad mode
// as c left it, and keeps the mode c leaves for its next switch. The mode
// is thread-local, and a generation sets it for its whole run (torch.SetGrad,
// restored when it returns): were it shared, a generation that ends would
// restore its caller's mode under one still running, which would then run
// with grad on (and off the fused decoder stack, which needs it off), and
// its log-probs would differ in the last bits from the same generation
// alone.
func (e *engineThread) inMode(c *engineCall, f func()) {
	base := torch.SwapGrad(c.grad)
	defer func() { c.grad = torch.SwapGrad(base) }()
	f()
}

// yield is the scheduler's (generate.Scheduler.SetYield): it lets the other
// calls run when the caller is the running coroutine, and returns at once
// (yielded false) otherwise: a plain call on the loop.
func (e *engineThread) yield() (yielded bool, err error) {
	c := e.cur
	if c == nil {
		return false, nil
	}
	if !c.yield(struct{}{}) {
		return true, errEngineClosed
	}
	return true, nil
}

// submit hands c to the loop, unless ctx ends or the engine stops first.
func (e *engineThread) submit(ctx context.Context, c *engineCall) error {
	select {
	case e.work <- c:
		return nil
	case <-e.quit:
		return errEngineClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onEngine runs f on m's engine thread when it has one (on the caller's
// goroutine otherwise) and returns its results. A caller whose ctx ends
// first gives up with ctx's error (the loop then skips the call, or lets it
// finish unread if it has begun), and so does one whose model closes before
// the call runs. f recovers its own panics (recoverEngine).
func onEngine[T any](ctx context.Context, m *Model, f func() (T, error)) (T, error) {
	var zero T
	e := m.engine
	if e == nil {
		return f()
	}
	var res T
	var err error
	done := make(chan struct{})
	c := &engineCall{
		run: func() {
			defer close(done)
			if err = ctx.Err(); err == nil {
				res, err = f()
			}
		},
		fail: func(why error) { err = why; close(done) },
	}
	if err := e.submit(ctx, c); err != nil {
		return zero, err
	}
	select {
	case <-done:
		return res, err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// generateOnEngine runs body as a coroutine of m's engine thread when it
// has one (on the caller's goroutine otherwise). body answers request i with
// send(i, r); the caller's goroutine runs deliver(i, r) for each, in order,
// as they come, and returns body's error once it has returned and every
// answer has been delivered, or ctx's error as soon as ctx ends (body,
// which checks ctx at each turn, then ends unread). body recovers its own
// panics.
func generateOnEngine[R any](ctx context.Context, m *Model, body func(send func(int, R)) error, deliver func(int, R)) error {
	e := m.engine
	if e == nil {
		return body(deliver)
	}
	type answer struct {
		i int
		r R
	}
	var (
		mu      sync.Mutex
		answers []answer
		err     error
	)
	wake := make(chan struct{}, 1)
	finished := make(chan struct{})
	send := func(i int, r R) {
		mu.Lock()
		answers = append(answers, answer{i, r})
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default: // a wake-up is already on its way
		}
	}
	c := &engineCall{
		coro: true,
		run: func() {
			defer close(finished)
			if err = ctx.Err(); err == nil {
				err = body(send)
			}
		},
		fail: func(why error) { err = why; close(finished) },
	}
	if err := e.submit(ctx, c); err != nil {
		return err
	}
	flush := func() {
		mu.Lock()
		batch := answers
		answers = nil
		mu.Unlock()
		for _, a := range batch {
			deliver(a.i, a.r)
		}
	}
	for {
		select {
		case <-wake:
			flush()
		case <-finished:
			flush()
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop ends the engine thread once the call it runs, if any, returns or
// yields; a generation that has begun unwinds (its next turn fails) and the
// calls not yet begun fail. It returns when the thread has ended.
func (e *engineThread) stop() {
	e.once.Do(func() { close(e.quit) })
	<-e.done
}
