package torch

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

var live atomic.Int64

// Live is the number of tensors created through this package and not yet
// dropped through it. Tests record it before and assert it returns after.
func Live() int64 { return live.Load() }

// Scope owns the tensors created through it and drops them on Close. It holds
// a sticky error: the first op that fails records it, later ops return nil.
// A scope locks its goroutine to the OS thread until Close (libtorch state is
// per thread), and the first one a goroutine opens keeps it on that thread
// for the rest of its life (see claimThread). A scope must be closed on the
// goroutine that created it.
//
//	s := torch.NewScope()
//	defer s.Close()
//	h := s.Add(x, s.Matmul(x, w)) // (B, T, C)
//	if err := s.Err(); err != nil { return nil, err }
//	return s.Keep(h), nil          // caller now owns h: torch.Drop(h)
type Scope struct {
	parent   *Scope
	children []*Scope // open children, closed with s
	tensors  []*Tensor
	err      error
	closed   bool
	locked   bool // holds a thread lock, released by Close (see holdThread)
}

// NewScope returns an empty root scope.
func NewScope() *Scope {
	return &Scope{locked: holdThread()}
}

// Child returns a scope whose errors also fail s. Use one per loop iteration
// (a layer, a decode step) so intermediates are freed early; move results out
// with MoveTo(parent, t).
func (s *Scope) Child() *Scope {
	c := &Scope{parent: s, err: s.err, locked: holdThread()}
	s.children = append(s.children, c)
	return c
}

// Err is the first error recorded on s (or on a child of s).
func (s *Scope) Err() error { return s.err }

// Fail records err (wrapped with nothing) as s's error, and its parents', if
// none is recorded yet. Later ops on s do nothing.
func (s *Scope) Fail(err error) {
	if err == nil {
		return
	}
	for p := s; p != nil; p = p.parent {
		if p.err == nil {
			p.err = err
		}
	}
}

// Failf records a formatted error like Fail.
func (s *Scope) Failf(format string, args ...any) { s.Fail(fmt.Errorf(format, args...)) }

// Track records a tensor produced by a gotch call outside this package's op
// set, so any gotch op can be used: y := s.Track(x.Erf(false)). On error it
// records the error and returns nil. Never pass del=true to the gotch call.
func (s *Scope) Track(t *Tensor, err error) *Tensor { return s.track("op", t, err) }

// op returns a function that tracks a gotch result under the op's name, so a
// multi-value gotch call can be passed straight in: s.op("Add")(a.Add(b, false)).
func (s *Scope) op(name string) func(*Tensor, error) *Tensor {
	return func(t *Tensor, err error) *Tensor { return s.track(name, t, err) }
}

func (s *Scope) track(op string, t *Tensor, err error) *Tensor {
	if err != nil {
		s.Fail(cleanErr(op, err))
		if t != nil && t.Ctensor() != nil {
			_ = t.Drop()
		}
		return nil
	}
	if t == nil {
		s.Fail(fmt.Errorf("torch %s: returned no tensor", op))
		return nil
	}
	if s.closed {
		s.Fail(fmt.Errorf("torch %s: scope already closed", op))
		_ = t.Drop()
		return nil
	}
	live.Add(1)
	s.tensors = append(s.tensors, t)
	return t
}

// ok reports whether an op may run: no error yet and every input present.
func (s *Scope) ok(op string, xs ...*Tensor) bool {
	if s.err != nil {
		return false
	}
	for i, x := range xs {
		if x == nil || x.Ctensor() == nil {
			s.Fail(fmt.Errorf("torch %s: input %d is nil or dropped", op, i))
			return false
		}
	}
	return true
}

// DType is x's dtype, for ops whose dtype follows an input's. After an error
// (x nil: an earlier op failed, out of memory for one) it returns Float32
// and records the error, so that a forward pass written straight through
// stops at its first failure instead of dereferencing nil.
func (s *Scope) DType(x *Tensor) DType {
	if !s.ok("DType", x) {
		return Float32
	}
	return x.DType()
}

// Keep removes t from s and hands it to the caller, who must Drop it (or pass
// it to another owner). A nil t (after an error) is returned as nil.
func (s *Scope) Keep(t *Tensor) *Tensor {
	if t == nil {
		return nil
	}
	for i := len(s.tensors) - 1; i >= 0; i-- {
		if s.tensors[i] == t {
			s.tensors = append(s.tensors[:i], s.tensors[i+1:]...)
			return t
		}
	}
	s.Fail(errors.New("torch Keep: tensor is not owned by this scope"))
	return nil
}

// MoveTo moves t from s to dst (typically s's parent) and returns it.
func (s *Scope) MoveTo(dst *Scope, t *Tensor) *Tensor {
	if t = s.Keep(t); t != nil {
		dst.tensors = append(dst.tensors, t)
	}
	return t
}

// Adopt hands an owned tensor (one that was Kept) back to s, which will drop it
// on Close.
func (s *Scope) Adopt(t *Tensor) *Tensor {
	if t != nil {
		s.tensors = append(s.tensors, t)
	}
	return t
}

// Close drops every tensor s still owns and unlocks the OS thread. Closing
// twice is a no-op. Children still open are closed first: code that closes
// each child as it goes leaves none, but a panic unwinding through the
// engine (gotch dereferences a nil tensor when an allocation fails) skips
// those closes, and the deferred Close of an outer scope then frees
// everything below it.
func (s *Scope) Close() {
	if s.closed {
		return
	}
	kids := s.children
	s.children = nil
	for i := len(kids) - 1; i >= 0; i-- {
		kids[i].Close()
	}
	s.closed = true
	for i := len(s.tensors) - 1; i >= 0; i-- {
		drop(s.tensors[i])
	}
	s.tensors = nil
	if s.parent == nil {
		dropStages(s)
	}
	if p := s.parent; p != nil {
		for i := len(p.children) - 1; i >= 0; i-- { // usually the last one
			if p.children[i] == s {
				p.children = append(p.children[:i], p.children[i+1:]...)
				break
			}
		}
	}
	if s.locked {
		runtime.UnlockOSThread()
	}
}

// lockThread pins the goroutine to its OS thread for a gotch call and the
// TorchErr that follows it: libtorch keeps the last error per thread, so a
// migration in between would lose the error or pin it on a later op.
func lockThread() (unlock func()) {
	claimThread()
	return runtime.UnlockOSThread
}

// holdThread is claimThread for a lock held across calls, a Scope's or
// SetGrad's: on a thread already claimed, whose goroutine can no longer
// leave it, it takes no lock and reports false, and the holder has nothing
// to undo; otherwise it claims the thread and reports true. So a goroutine
// that has claimed its thread holds no more locks with a scope open than
// without one, which Go's coroutines need: a switch to or from one
// (iter.Pull) requires the thread's lock count that it had when the
// coroutine was created, and the engine thread's generations are
// coroutines that yield with their scopes open (model/torchbe's
// engineThread).
func holdThread() (locked bool) {
	if ThreadClaimed() {
		return false
	}
	claimThread()
	return true
}

// ClaimThread makes the calling goroutine its OS thread's owner for good,
// as its first engine call would (see claimThread), and holds no lock to
// undo. For a goroutine that will create coroutines that use the engine
// (iter.Pull): claimed inside one, the thread would take its permanent lock
// there, and the coroutine's next switch would find a lock count other
// than the one it was created with.
func ClaimThread() {
	if holdThread() {
		runtime.UnlockOSThread()
	}
}

// claimThread locks the calling goroutine to its OS thread, undone by one
// runtime.UnlockOSThread, like runtime.LockOSThread. The first goroutine to
// claim a thread also takes a second lock that it never releases: from then
// on it runs on that thread alone, and when it exits the thread exits with it
// (Go ends a thread whose goroutine exits locked). So every goroutine that
// calls libtorch does so from one OS thread, its own.
//
// Why: the OpenMP runtime inside libtorch's CPU build (libgomp) gives each OS
// thread that starts a parallel region its own pool of worker threads, kept
// until that thread exits. Go would otherwise run a goroutine's successive
// engine calls on whichever thread is free, and each new thread adds a pool.
// Once the pools hold more threads than there are CPUs, libgomp lets an idle
// worker spin only 100 iterations before it sleeps (instead of about 3 ms),
// and from then on every small operation pays a futex wake-up: a sequence of
// short forward passes at 2 threads ran about 1.6 times slower in such a
// process (docs/engine.md, "Threads and grad mode"). One thread per goroutine keeps one pool
// per goroutine that uses the engine, and a goroutine that ends frees its
// pool.
//
// The mark that a thread is claimed is thread-local in C; a claimed thread
// only ever runs its claimant, and dies with it, so the mark is never seen
// by another goroutine. The main thread is the exception Go makes: it never
// ends it, and parks it for good when a goroutine exits locked to it, which
// would keep that goroutine's pool, and the throttle, for the life of the
// process (whether a short-lived goroutine landed there was chance: a
// process's judge ran at one speed or at half of it). So the init
// below keeps the main thread for the main goroutine alone.
func claimThread() {
	runtime.LockOSThread()
	if !cClaimThread() {
		runtime.LockOSThread()
	}
}

// OnOwnThread runs f on a new goroutine that claims its OS thread (see
// claimThread) and ends when f returns, and returns f's error. The thread
// ends with the goroutine, and so does the libgomp worker pool that f's
// parallel ops started on it. For one-off engine work, such as loading a
// model, done on a goroutine that lives on without using the engine after
// it: a command's main goroutine that loads the model its shard workers or
// its server's connections then run (docs/engine.md, "Threads and grad
// mode"). Done on
// that goroutine, the work would leave a second pool alive beside the
// workers', and two pools at 2 intra-op threads on 2 CPUs throttle every op
// of both.
func OnOwnThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		claimThread()
		done <- f()
	}()
	return <-done
}

// init locks the main goroutine to the main thread (Go then runs main on
// it, and no other goroutine ever runs there): see claimThread.
func init() { runtime.LockOSThread() }

// Len is the number of tensors s owns (for tests and debugging).
func (s *Scope) Len() int { return len(s.tensors) }

// Drop frees tensors the caller owns (ones returned by Keep, or by a function
// documented to return owned tensors). Nil tensors are skipped.
func Drop(ts ...*Tensor) {
	for _, t := range ts {
		drop(t)
	}
}

func drop(t *Tensor) {
	if t == nil || t.Ctensor() == nil {
		return
	}
	// gotch's Drop only fails on a double free, which it already skips.
	_ = t.Drop()
	live.Add(-1)
}
