package generate

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// Scheduler shares one engine between concurrent Generate calls, fairly and
// within a memory budget (`evolm serve` runs one per model):
//
//   - Turns. A call takes a turn for each unit of engine work (a prefill
//     chunk, one decode step of its rows) and gives it back after, and turns
//     are granted first come, first served. Concurrent calls therefore
//     interleave step by step: a call that decodes 16 × 3000 tokens holds the
//     engine for one step at a time, and a small call that arrives meanwhile
//     waits one step per step, not for the whole large call.
//
//   - Budget. Before a chunk allocates anything it reserves its estimated
//     peak bytes (Generator.EstimateBytes) from the budget, FIFO, and
//     returns them when it ends; chunks are packed to fit the budget. A
//     request that alone needs more than the budget is refused by
//     Generator.Admit before any work.
//
//   - One goroutine. Where every call runs on one goroutine as a coroutine
//     of its (model/torchbe's engine thread), SetYield gives the scheduler
//     the way to let the others run: Turn yields first, and a reservation
//     yields while the budget is short, instead of blocking that goroutine.
//
// A nil *Scheduler grants every turn and has no budget. It is safe for
// concurrent use.
type Scheduler struct {
	budget int64 // bytes; 0 = unlimited
	sem    *semaphore.Weighted
	yield  func() (yielded bool, err error) // SetYield's; nil: none

	mu    sync.Mutex
	busy  bool
	queue []chan struct{}
}

// NewScheduler returns a scheduler with a memory budget in bytes (0: none).
func NewScheduler(budgetBytes int64) *Scheduler {
	s := &Scheduler{budget: max(budgetBytes, 0)}
	if s.budget > 0 {
		s.sem = semaphore.NewWeighted(s.budget)
	}
	return s
}

// SetYield makes every Turn, and every wait for budget, first call yield,
// before the scheduler is used. yield lets the engine goroutine's other
// calls run and returns when the caller's call may go on (yielded true), at
// once when the caller is not one of its coroutines (yielded false), or
// with an error when the call must end (the engine is closing). With it,
// calls that share one goroutine take their turns in the order they yield,
// and none ever waits for a turn: the one that runs holds none of the
// others'.
func (s *Scheduler) SetYield(yield func() (yielded bool, err error)) { s.yield = yield }

// Budget is the memory budget in bytes (0: none).
func (s *Scheduler) Budget() int64 {
	if s == nil {
		return 0
	}
	return s.budget
}

// Turn blocks until it is the caller's turn on the engine and returns the
// function that ends the turn, or ctx's error.
func (s *Scheduler) Turn(ctx context.Context) (done func(), err error) {
	if s == nil {
		return func() {}, ctx.Err()
	}
	if s.yield != nil {
		if _, err := s.yield(); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	if !s.busy {
		s.busy = true
		s.mu.Unlock()
		return s.next, nil
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return s.next, nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, c := range s.queue {
			if c == ch {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				s.mu.Unlock()
				return nil, context.Cause(ctx)
			}
		}
		s.mu.Unlock()
		s.next() // the turn was granted as ctx ended: pass it on
		return nil, context.Cause(ctx)
	}
}

// next hands the engine to the longest waiter, if any.
func (s *Scheduler) next() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.busy = false
		return
	}
	ch := s.queue[0]
	s.queue = s.queue[1:]
	close(ch)
}

// reserve blocks until n bytes of the budget are free and returns the
// function that frees them.
func (s *Scheduler) reserve(ctx context.Context, n int64) (release func(), err error) {
	if s == nil || s.sem == nil {
		return func() {}, nil
	}
	n = min(max(n, 1), s.budget)
	acquired := false
	for s.yield != nil {
		if acquired = s.sem.TryAcquire(n); acquired {
			break
		}
		yielded, err := s.yield()
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !yielded { // not one of the engine goroutine's coroutines: it may block
			break
		}
	}
	if !acquired {
		if err := s.sem.Acquire(ctx, n); err != nil {
			return nil, err
		}
	}
	return func() { s.sem.Release(n) }, nil
}

// turn runs f in one turn of g's scheduler.
func (g *Generator) turn(ctx context.Context, f func() error) error {
	done, err := g.opt.Scheduler.Turn(ctx)
	if err != nil {
		return err
	}
	defer done()
	return f()
}

// EstimateBytes is an upper estimate of the peak memory of generating reqs
// in one chunk: the prompt KV cache and its expansion to one row per sample,
// the largest prefill activations of one layer (attention scores of one
// prefill chunk against the whole prompt, in float32, and the MLP), and the
// float32 logits of two decode steps.
func (g *Generator) EstimateBytes(reqs []Request) int64 {
	cfg := g.m.Config()
	es := int64(dtypeSize(g.m))
	P, S := int64(len(reqs)), int64(0)
	Tp, maxNew := int64(0), int64(0)
	for i := range reqs {
		S += int64(reqs[i].samples())
		Tp = max(Tp, int64(len(reqs[i].Prompt)))
		maxNew = max(maxNew, int64(reqs[i].MaxNewTokens))
	}
	L, nkv, nh, hs := int64(cfg.NumHiddenLayers), int64(cfg.NumKeyValueHeads), int64(cfg.NumAttentionHeads), int64(cfg.HeadDim)
	C, I, V := int64(cfg.HiddenSize), int64(cfg.IntermediateSize), int64(cfg.VocabSize)
	kv := (P + S) * L * 2 * nkv * hs * (Tp + maxNew) * es
	T := min(Tp, g.prefillChunkFor(P, Tp))
	scores := P * nh * T * Tp * 4 * 2              // scores (scaled and masked in place) and softmax, float32
	acts := P * T * (4*C + 3*I + 2*nh*hs) * es * 2 // projections, MLP, residuals
	logits := 2 * max(P, S) * V * 4 * 2
	// Prompt log-probs take (rows, promptBlock, V) logits, their
	// log-softmax and a rank mask per pass.
	var promptLP int64
	for i := range reqs {
		if reqs[i].PromptLogProbs {
			promptLP += min(int64(promptBlock), T) * V * (4 + 4 + 1)
		}
	}
	return kv + scores + acts + logits + promptLP
}

// Admit checks that every request fits the scheduler's budget on its own;
// the error names the first that does not.
func (g *Generator) Admit(reqs []Request) error {
	b := g.opt.Scheduler.Budget()
	if b == 0 {
		return nil
	}
	for i := range reqs {
		if n := g.EstimateBytes(reqs[i : i+1]); n > b {
			return fmt.Errorf("request %d needs about %d MiB of engine memory (%d prompt tokens, %d samples of up to %d tokens), over the budget of %d MiB",
				i, n>>20, len(reqs[i].Prompt), reqs[i].samples(), reqs[i].MaxNewTokens, b>>20)
		}
	}
	return nil
}

func dtypeSize(m model.CausalLM) int { return max(torch.ElemSize(m.DType()), 1) }
