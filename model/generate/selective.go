package generate

import (
	"fmt"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// LogitChunkElems bounds the float32 logits (B × chunk × V elements, 256 MiB)
// that Selective materializes at once, forward or backward. evolm plan
// counts the logits chunk from it.
const LogitChunkElems = 1 << 26

// FullLogits turns chunking off: Selective projects all T positions at
// once and, with grad on, lets autograd keep the (B, T, V) logits until
// backward, as the engine did before chunking. It exists as the baseline of
// bench/memory; leave it false.
var FullLogits = false

// chunkElems is LogitChunkElems; tests lower it to force many chunks.
var chunkElems int64 = LogitChunkElems

// SetLogitChunkElems replaces LogitChunkElems (n > 0) until the returned
// function restores it: for tests in other packages that need many chunks
// on a small model.
func SetLogitChunkElems(n int64) (restore func()) {
	old := chunkElems
	chunkElems = max(1, n)
	return func() { chunkElems = old }
}

// LogitChunk is the number of sequence positions Selective projects to the
// vocabulary at once for a batch of B rows and a vocabulary of V.
func LogitChunk(B, T, V int64) int64 {
	return max(1, min(T, chunkElems/max(1, B*V)))
}

// Selective is the chunked selective log-softmax: given final hidden states
// h (B, T, C) and targets (B, T) int64, it returns log p(target) (B, T) and,
// when entropy is set, the entropy of each next-token distribution (B, T),
// both float32 and owned by s, without ever holding (B, T, V) logits.
//
// Forward. Positions are taken LogitChunk at a time: logits = lm_head(h
// chunk) in float32 (B, n, V); lsm = log_softmax(logits); log-prob =
// lsm[target]; entropy = −Σ exp(lsm)·lsm. Each chunk's logits are freed
// before the next.
//
// Backward. When one chunk covers all T positions, autograd backpropagates
// through that chunk as through any op. Otherwise, when grad is on and h
// requires grad, every chunk after the first runs the forward above with
// grad off, and its outputs are leaves that require grad; the first chunk
// runs last, with grad on from a boundary leaf of h, and autograd keeps its
// logits. The loss's backward takes the first chunk's share into lm_head's
// gradient and the leaf's. A deferred backward stage
// (torch.Scope.DeferBackward) runs after it: it reads ∂loss/∂log-prob and
// ∂loss/∂entropy of the other chunks from their leaves, and per chunk
// recomputes the chunk's logits with grad on from the boundary leaf and
// backpropagates the explicit grad outputs (torch.Scope.BackwardWith). That
// accumulates lm_head's gradient and ∂loss/∂h chunk by chunk; finally ∂loss/∂h
// goes back through the model's graph once. The first chunk's logits are
// alive from its forward to the loss's backward, while no other chunk's are,
// so at most one chunk's logits and their gradient are alive at any time,
// only the chunks after the first are projected twice, and the result
// equals the full computation's gradient (up to float summation order).
// torch.Backward on the loss runs the stage; s must stay open until then.
func Selective(s *torch.Scope, m model.CausalLM, h, targets *torch.Tensor, entropy bool) (lp, ent *torch.Tensor, err error) {
	sh, err := torch.Shape(h)
	if err != nil {
		return nil, nil, fmt.Errorf("selective log-softmax: hidden: %w", err)
	}
	if len(sh) != 3 {
		return nil, nil, fmt.Errorf("selective log-softmax: hidden shape %v, want (B, T, C)", sh)
	}
	B, T := sh[0], sh[1]
	chunk := LogitChunk(B, T, int64(m.Config().VocabSize))
	grad := torch.GradEnabled() && torch.RequiresGrad(h)
	// One chunk covers every position: autograd keeps its logits until
	// backward, which then needs no second projection. The logits alive at
	// once are the chunked backward's (one chunk and its gradient), so the
	// memory bound holds.
	// The chunk's intermediates live in a child scope, closed on return:
	// past that, only what autograd saved for backward holds their memory.
	if FullLogits || (grad && chunk >= T) {
		c := s.Child()
		defer c.Close()
		l, e, err := selectiveChunk(c, m, h, targets, entropy)
		if err != nil {
			return nil, nil, fmt.Errorf("selective log-softmax: %w", err)
		}
		lp = c.MoveTo(s, l)
		if entropy {
			ent = c.MoveTo(s, e)
		}
		if err := s.Err(); err != nil {
			return nil, nil, fmt.Errorf("selective log-softmax: %w", err)
		}
		return lp, ent, nil
	}

	hd := h
	first := int64(0) // positions [0, first) are the chunk autograd keeps
	if grad {
		hd = s.Boundary(h) // (B, T, C) leaf: the chunk graphs stop here
		first = chunk
	}
	c := s.Child()
	defer c.Close()
	var lps, ents []*torch.Tensor
	err = torch.NoGrad(func() error {
		for t0 := first; t0 < T; t0 += chunk {
			// Each chunk's (B, n, V) logits and their softmax live in a
			// scope of their own, freed before the next chunk: only the
			// (B, n) results outlive it.
			n := min(chunk, T-t0)
			cc := c.Child()
			l, e, err := selectiveChunk(cc, m, cc.Narrow(hd, 1, t0, n), cc.Narrow(targets, 1, t0, n), entropy)
			if err != nil {
				cc.Close()
				return err
			}
			lps = append(lps, cc.MoveTo(c, l))
			if entropy {
				ents = append(ents, cc.MoveTo(c, e))
			}
			cc.Close()
		}
		return c.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("selective log-softmax: %w", err)
	}
	lp = c.MoveTo(s, c.Cat(lps, 1)) // (B, T) or, with grad, (B, T - first)
	if entropy {
		ent = c.MoveTo(s, c.Cat(ents, 1))
	}
	if err := s.Err(); err != nil {
		return nil, nil, fmt.Errorf("selective log-softmax: %w", err)
	}
	if !grad {
		return lp, ent, nil
	}
	lpRest, entRest := s.Boundary(lp), ent // leaves the deferred stage reads
	if entropy {
		entRest = s.Boundary(ent)
	}
	// The first chunk, last and with grad on: its logits are kept for the
	// loss's backward, after the other chunks' forward freed theirs.
	k := s.Child()
	l, e, err := selectiveChunk(k, m, k.Narrow(hd, 1, 0, first), k.Narrow(targets, 1, 0, first), entropy)
	if err == nil {
		lp = s.Cat([]*torch.Tensor{l, lpRest}, 1) // (B, T)
		if entropy {
			ent = s.Cat([]*torch.Tensor{e, entRest}, 1)
		}
	}
	k.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("selective log-softmax: %w", err)
	}
	for _, t := range []*torch.Tensor{h, hd, targets, lpRest, entRest} {
		s.Hold(t)
	}
	s.DeferBackward("selective log-softmax", func() error {
		return selectiveBackward(m, h, hd, targets, lpRest, entRest, chunk, first)
	})
	return lp, ent, s.Err()
}

// selectiveChunk computes one chunk's log-probs and entropies (B, n) from
// hidden states (B, n, C) in the current grad mode.
func selectiveChunk(s *torch.Scope, m model.CausalLM, h, tgt *torch.Tensor, entropy bool) (lp, ent *torch.Tensor, err error) {
	lg, err := m.Logits(s, h) // (B, n, V) float32
	if err != nil {
		return nil, nil, err
	}
	// log_softmax, not logit − logsumexp: libtorch 2.1's CPU logsumexp makes
	// a logits-sized temporary in forward and keeps the logits for a
	// backward of two more, where log_softmax's backward is one kernel over
	// its saved output. A tiny model's forward+backward took 0.66–0.69 s
	// instead of 0.95 and peaked 300 MB lower (docs/engine.md, "The learner").
	lsm := s.LogSoftmax(lg, -1, torch.Float32)               // (B, n, V)
	lp = s.Squeeze(s.Gather(lsm, 2, s.Unsqueeze(tgt, 2)), 2) // (B, n)
	if entropy {
		ent = s.Neg(s.SumDim(s.Mul(s.Exp(lsm), lsm), []int64{2}, false)) // (B, n)
	}
	return lp, ent, s.Err()
}

// recomputedPositions counts the positions selectiveBackward projected
// again (for tests).
var recomputedPositions atomic.Int64

// selectiveBackward is Selective's deferred backward stage (grad on): lp
// and ent are the leaves of positions [first, T), which it recomputes
// chunk by chunk; the loss's backward has already taken the first chunk's
// share into hd's gradient.
func selectiveBackward(m model.CausalLM, h, hd, targets, lp, ent *torch.Tensor, chunk, first int64) error {
	s := torch.NewScope()
	defer s.Close()
	gl := s.Grad(lp)
	var ge *torch.Tensor
	if ent != nil {
		ge = s.Grad(ent)
	}
	if gl == nil && ge == nil {
		return s.Err() // the loss did not use them
	}
	sh, err := torch.Shape(hd)
	if err != nil {
		return err
	}
	T := sh[1]
	for t0 := first; t0 < T; t0 += chunk {
		n := min(chunk, T-t0)
		c := s.Child()
		l, e, err := selectiveChunk(c, m, c.Narrow(hd, 1, t0, n), c.Narrow(targets, 1, t0, n), ent != nil)
		if err == nil {
			var y, g []*torch.Tensor
			if gl != nil {
				y, g = append(y, l), append(g, c.Narrow(gl, 1, t0-first, n))
			}
			if ge != nil {
				y, g = append(y, e), append(g, c.Narrow(ge, 1, t0-first, n))
			}
			err = c.BackwardWith(c.Cat(y, 1), c.Cat(g, 1))
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("positions %d..%d: %w", t0, t0+n-1, err)
		}
		recomputedPositions.Add(n)
	}
	gh := s.Grad(hd) // (B, T, C) ∂loss/∂h
	if gh == nil {
		return s.Err()
	}
	return s.BackwardWith(h, gh)
}
