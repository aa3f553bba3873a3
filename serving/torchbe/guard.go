package torchbe

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/evolm/evolm/serving/backend"
)

// hold gives a whole call the engine: the model stays open until release,
// and the call runs in one turn of the scheduler, between the decode steps
// of concurrent generations.
func (m *Model) hold(ctx context.Context, what string) (release func(), err error) {
	m.mu.RLock()
	if m.gone() {
		m.mu.RUnlock()
		return nil, fmt.Errorf("%s: model is closed", what)
	}
	done, err := m.sched.Turn(ctx)
	if err != nil {
		m.mu.RUnlock()
		return nil, err
	}
	if err := m.activate(); err != nil {
		done()
		m.mu.RUnlock()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() { done(); m.mu.RUnlock() }, nil
}

// recoverEngine, deferred by every entry point, fails the call, not the
// process, when the engine panics: gotch dereferences a nil tensor when
// libtorch cannot allocate (a failed malloc leaves no tensor and, when its
// message cannot be copied either, no error). The scopes, the cache, the
// scheduler's turn and the thread lock are all released by the call's own
// defers, so the engine stays usable. A panic, and a libtorch error that
// says it ran out of memory, are marked backend.ErrUnavailable (HTTP 503 in
// `evolm serve`).
func recoverEngine(what string, err *error) {
	if p := recover(); p != nil {
		slog.Error(what+": engine panic; the call fails, the engine goes on", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = fmt.Errorf("%s: engine panic: %v: %w", what, p, backend.ErrUnavailable)
		return
	}
	if *err != nil && outOfMemory(*err) {
		*err = fmt.Errorf("%w: %w", *err, backend.ErrUnavailable)
	}
}

// outOfMemory reports whether a libtorch error is an allocation failure
// (CPU or CUDA).
func outOfMemory(err error) bool {
	s := strings.ToLower(err.Error())
	for _, k := range []string{"out of memory", "can't allocate memory", "cannot allocate memory", "bad_alloc", "failed to allocate"} {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}
