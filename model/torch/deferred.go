package torch

import (
	"fmt"
	"sync"
	"syscall"
)

// Deferred backward: recomputation without torch.utils.checkpoint.
//
// libtorch's C++ API has no checkpoint or custom autograd Function reachable
// from Go, so memory-saving recomputation is built from two pieces, a
// boundary and a continuation:
//
//   - Boundary(x) returns xd, a detached leaf copy (shared storage) of x that
//     requires grad. Everything computed from xd records a graph that stops at
//     xd, so backward over it leaves ∂loss/∂xd in xd.grad and goes no
//     further; whatever built x can have run with grad off (keeping nothing).
//   - DeferBackward(fn) registers fn as a backward stage of the current OS
//     thread (stages are per thread, as libtorch's grad mode is; scopes keep
//     the thread locked). Backward(loss) runs loss.backward() and then every
//     stage registered on the thread, last registered first: each recomputes
//     its piece with grad on and pushes the gradient of its boundary further
//     back with BackwardWith (explicit grad outputs).
//
// BackwardWith(y, g) is y.backward(g) expressed as (y·g).sum().backward():
// autograd's gradient of that sum with respect to y is exactly g (1·g), so the
// gradients are bit-identical to torch's backward with grad_outputs, at the
// cost of one elementwise product. gotch binds neither Tensor::backward(grad)
// nor autograd::grad with grad_outputs, and this needs no C++ shim.
//
// A stage belongs to the root of the scope that registered it: tensors it
// needs are moved to that root with Hold (the forward's child scopes close
// long before backward), and closing the root drops its stages that never
// ran, so a forward with grad on whose backward never comes costs nothing
// once its root is closed.

// backwardStage is one registered continuation.
type backwardStage struct {
	owner *Scope // root scope that holds its tensors
	name  string
	fn    func() error
}

var (
	stagesMu sync.Mutex
	stages   = map[int][]backwardStage{} // by OS thread id
)

func (s *Scope) root() *Scope {
	r := s
	for r.parent != nil {
		r = r.parent
	}
	return r
}

// Hold moves t to s's root scope, so it outlives s until the root closes
// (tensors a deferred backward stage needs), and returns it. t may be owned
// by s or by any scope between s and the root; a tensor none of them owns
// (the caller's own) is left alone.
func (s *Scope) Hold(t *Tensor) *Tensor {
	r := s.root()
	if t == nil {
		return t
	}
	for p := s; p != nil && p != r; p = p.parent {
		for i := len(p.tensors) - 1; i >= 0; i-- {
			if p.tensors[i] == t {
				p.tensors = append(p.tensors[:i], p.tensors[i+1:]...)
				r.tensors = append(r.tensors, t)
				return t
			}
		}
	}
	return t
}

// Boundary returns a leaf view of x, detached from x's graph, that requires
// grad (see the deferred-backward note above), owned by s.
func (s *Scope) Boundary(x *Tensor) *Tensor {
	xd := s.Detach(x)
	if xd == nil {
		return nil
	}
	if err := SetRequiresGrad(xd, true); err != nil {
		s.Fail(err)
		return nil
	}
	return xd
}

// DeferBackward registers fn to run after the next Backward on this OS
// thread (see the note above); s must stay open until then. name appears in
// errors.
func (s *Scope) DeferBackward(name string, fn func() error) {
	tid := syscall.Gettid()
	stagesMu.Lock()
	defer stagesMu.Unlock()
	stages[tid] = append(stages[tid], backwardStage{owner: s.root(), name: name, fn: fn})
}

// Deferred is the number of backward stages registered on this OS thread
// and not yet run.
func Deferred() int {
	stagesMu.Lock()
	defer stagesMu.Unlock()
	return len(stages[syscall.Gettid()])
}

// dropStages forgets the stages owned by root (on its Close).
func dropStages(root *Scope) {
	tid := syscall.Gettid()
	stagesMu.Lock()
	defer stagesMu.Unlock()
	st := stages[tid]
	if len(st) == 0 {
		return
	}
	keep := st[:0]
	for _, x := range st {
		if x.owner != root {
			keep = append(keep, x)
		}
	}
	if len(keep) == 0 {
		delete(stages, tid)
		return
	}
	stages[tid] = keep
}

// popStage takes this thread's last registered stage.
func popStage(tid int) (backwardStage, bool) {
	stagesMu.Lock()
	defer stagesMu.Unlock()
	st := stages[tid]
	if len(st) == 0 {
		return backwardStage{}, false
	}
	x := st[len(st)-1]
	if len(st) == 1 {
		delete(stages, tid)
	} else {
		stages[tid] = st[:len(st)-1]
	}
	return x, true
}

// runStages runs and removes this thread's backward stages, last first. On
// error the remaining ones are dropped.
func runStages() error {
	tid := syscall.Gettid()
	for {
		x, ok := popStage(tid)
		if !ok {
			return nil
		}
		if err := x.fn(); err != nil {
			stagesMu.Lock()
			delete(stages, tid)
			stagesMu.Unlock()
			return fmt.Errorf("torch backward (%s): %w", x.name, err)
		}
	}
}

// BackwardWith accumulates into every leaf of y's graph the gradient of
// Σ y·g, that is y.backward(g), bit for bit (see the note above). y and g
// have one shape; g carries no graph. Temporaries live in a child of s.
func (s *Scope) BackwardWith(y, g *Tensor) error {
	c := s.Child()
	defer c.Close()
	l := c.Sum(c.Mul(y, g))
	if err := c.Err(); err != nil {
		return err
	}
	return backward(l)
}

// Checkpoint runs n blocks in sequence on x, y = f(n−1)(…f(0)(x)), keeping
// only each block's input (activation checkpointing). f(s, i, x) computes
// block i in s; it must be deterministic (no dropout) and may read tensors
// that live until the root scope closes (hold them with Hold).
//
// With grad off it is a plain loop, one child scope per block. With grad on, the blocks run with grad off, their inputs are held on the
// root, and the output is a boundary leaf; a deferred backward stage then
// recomputes block n−1 … 0 with grad on from a boundary of its input,
// backpropagates the gradient that arrived at its output (BackwardWith),
// which accumulates the block's parameter gradients and yields the gradient
// of its input, and finally pushes the gradient of x into x's own graph when
// x requires grad. Peak activation memory is n block inputs plus one block's
// activations, for one extra forward of every block.
func (s *Scope) Checkpoint(x *Tensor, n int, f func(s *Scope, i int, x *Tensor) *Tensor) *Tensor {
	if !s.ok("Checkpoint", x) {
		return nil
	}
	if !GradEnabled() {
		for i := 0; i < n; i++ {
			c := s.Child()
			x = c.MoveTo(s, f(c, i, x))
			c.Close()
		}
		return x
	}
	inputs := make([]*Tensor, n)
	restore := SetGrad(false)
	h := s.Detach(x)
	for i := 0; i < n && s.Err() == nil; i++ {
		inputs[i] = s.Hold(h)
		c := s.Child()
		h = c.MoveTo(s, f(c, i, h))
		c.Close()
	}
	restore()
	out := s.Boundary(h)
	if s.Err() != nil {
		return nil
	}
	s.Hold(x)
	s.Hold(out)
	s.DeferBackward("checkpointed blocks", func() error {
		return checkpointBackward(x, out, inputs, f)
	})
	return out
}

func checkpointBackward(x, out *Tensor, inputs []*Tensor, f func(s *Scope, i int, x *Tensor) *Tensor) error {
	s := NewScope()
	defer s.Close()
	g := s.Grad(out)
	if g == nil {
		return s.Err()
	}
	for i := len(inputs) - 1; i >= 0; i-- {
		c := s.Child()
		xi := c.Boundary(inputs[i])
		// The block runs in a scope of its own, closed before the
		// backward: autograd keeps what it saved, and the block's other
		// intermediates are freed, as in the forward without
		// checkpointing.
		fc := c.Child()
		y := fc.MoveTo(c, f(fc, i, xi))
		fc.Close()
		err := c.Err()
		if err == nil {
			err = c.BackwardWith(y, g)
		}
		if err == nil {
			g = c.MoveTo(s, c.Grad(xi))
			err = c.Err()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
		if g == nil {
			return nil // nothing upstream depends on this block's input
		}
	}
	if !RequiresGrad(x) {
		return nil
	}
	return s.BackwardWith(x, g)
}
