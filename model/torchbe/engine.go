package torchbe

import (
	"context"
	"errors"
	"sync"
)

// engineThread runs the Score, ScoreNaive and LogProbs calls of a Model
// whose Options.OneThread is set on one goroutine, and so on one OS thread:
// the calls come from several goroutines (a stage's shard workers) but take
// the engine one at a time anyway (a scheduler turn each). Run from their
// callers' goroutines, each caller's thread would keep a libgomp worker pool
// of its own, and once the pools' threads outnumber the CPUs libgomp
// throttles every op of every pool: two shard workers at 2 intra-op threads
// on 2 CPUs ran the judge stage 3× slower than one (docs/engine-speed.md
// §28). Generate keeps running on its callers' goroutines: its calls
// interleave decode step by decode step, which one goroutine cannot do
// without the scheduler handing it each step.
type engineThread struct {
	work chan func()
	quit chan struct{} // closed by stop
	once sync.Once
}

func newEngineThread() *engineThread {
	e := &engineThread{work: make(chan func()), quit: make(chan struct{})}
	go func() {
		for {
			select {
			case f := <-e.work:
				f()
			case <-e.quit:
				return
			}
		}
	}()
	return e
}

var errEngineClosed = errors.New("model is closed")

// onEngine runs f on m's engine thread when it has one (on the caller's
// goroutine otherwise) and returns its results. A caller waiting for the
// engine thread to take its call gives up when ctx ends or the model
// closes. f recovers its own panics (recoverEngine).
func onEngine[T any](ctx context.Context, m *Model, f func() (T, error)) (T, error) {
	e := m.engine
	if e == nil {
		return f()
	}
	var res T
	var err error
	done := make(chan struct{})
	call := func() {
		defer close(done)
		res, err = f()
	}
	select {
	case e.work <- call:
	case <-e.quit:
		return res, errEngineClosed
	case <-ctx.Done():
		return res, ctx.Err()
	}
	<-done
	return res, err
}

// stop ends the engine thread once the call it runs, if any, returns;
// calls not yet taken fail.
func (e *engineThread) stop() { e.once.Do(func() { close(e.quit) }) }
