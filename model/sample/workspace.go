package sample

import (
	"fmt"
	"math"

	gts "github.com/sugarme/gotch/ts"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// Workspace holds the two vocabulary-sized float32 buffers a decode loop
// reuses from step to step: one the model writes its logits into
// (model.LogitsWriter) and one the sampler works in. A step's (B, V)
// tensors are megabytes each (19 MB at 32 rows of Qwen's 151,936 tokens);
// allocated afresh every step, each costs the page faults and the zeroing
// of all its pages, which on the CPU were a third of a batched sampling
// step. The buffers grow to the largest batch seen and are freed by Close.
// A Workspace belongs to one decode loop (one goroutine).
type Workspace struct {
	logits, work buffer
}

// buffer is one (rows, vocab) float32 tensor on dev, grown on demand.
type buffer struct {
	t           *torch.Tensor
	rows, vocab int64
	dev         torch.Device
}

// view returns the first rows of b, made to hold at least rows × vocab on
// dev, owned by s.
func (b *buffer) view(s *torch.Scope, rows, vocab int64, dev torch.Device) *torch.Tensor {
	if b.t == nil || rows > b.rows || vocab != b.vocab || dev != b.dev {
		b.free()
		bs := torch.NewScope()
		t := bs.Keep(bs.Empty([]int64{rows, vocab}, torch.Float32, dev))
		err := bs.Err()
		bs.Close()
		if err != nil {
			s.Fail(fmt.Errorf("sample workspace (%d, %d): %w", rows, vocab, err))
			return nil
		}
		b.t, b.rows, b.vocab, b.dev = t, rows, vocab, dev
	}
	return s.Narrow(b.t, 0, 0, rows)
}

func (b *buffer) free() {
	torch.Drop(b.t)
	b.t, b.rows = nil, 0
}

// Close frees the buffers.
func (w *Workspace) Close() {
	w.logits.free()
	w.work.free()
}

// Logits returns a (rows, vocab) float32 view of the logits buffer, owned
// by s, for the model to write a step's logits into. It stays valid until
// the next Logits call; Sample reads it before the next step writes.
func (w *Workspace) Logits(s *torch.Scope, rows, vocab int64, dev torch.Device) (*torch.Tensor, error) {
	t := w.logits.view(s, rows, vocab, dev)
	return t, s.Err()
}

// simple reports whether every row is greedy or temperature-only: the rows
// sampleSimple handles.
func simple(rows []Row, vocab int64) bool {
	for _, r := range rows {
		if k := rowKind(r.Params, vocab); k != kindGreedy && k != kindPlain {
			return false
		}
	}
	return true
}

// sampleSimple is Sample for batches of greedy and temperature-only rows,
// in a few passes over one reused (B, V) buffer instead of a fresh tensor
// per op:
//
//  1. lse = logsumexp(x) row-wise, as libtorch computes it (amax, then the
//     sum of exp(x − max) in the buffer, log, plus max): bit-identical to
//     torch.logsumexp.
//  2. Unless every row is greedy: the buffer becomes exp((x − max)/T) per
//     row (the temperature distribution, unnormalised; for T = 1 step 1
//     left it there), its running sum in place, and each row's token is the
//     first whose cumulative mass reaches u·total: the inverse CDF of the
//     package contract, in vocabulary order, one uniform per row.
//  3. Greedy rows take argmax(x) (the first index on ties).
//
// The log-prob of each token is x[token] − lse (raw logits).
func sampleSimple(s *torch.Scope, ws *Workspace, x *torch.Tensor, rows []Row, b, vocab int64, dev torch.Device) (*torch.Tensor, *torch.Tensor) {
	buf := ws.work.view(s, b, vocab, dev)                     // (B, V)
	m := s.Amax(x, []int64{1}, true)                          // (B, 1)
	m = s.MaskedFill(m, s.EqScalar(s.Abs(m), math.Inf(1)), 0) // as logsumexp: an infinite max subtracts 0
	s.SubOut(buf, x, m)
	s.Exp_(buf)
	lse := s.Add(s.Log(s.SumDim(buf, []int64{1}, true)), m) // (B, 1)

	greedy, unit := 0, true
	temps := make([]float32, b)
	us := make([]float32, b)
	for i, r := range rows {
		temps[i] = 1
		if r.Greedy() {
			greedy++
			continue
		}
		temps[i] = float32(r.Temperature)
		unit = unit && r.Temperature == 1
		// (0, 1]: the threshold u·total is then > 0 and ≤ total, so the
		// chosen token always has positive mass.
		us[i] = float32(1 - r.RNG.Float64())
	}
	var tokens *torch.Tensor // (B)
	if greedy > 0 {
		tokens = fused.Argmax(s, x) // torch.argmax, vectorized on CPU
	}
	if greedy < len(rows) {
		if !unit {
			s.SubOut(buf, x, m)
			s.Div_(buf, s.To(s.FromFloat32(temps, b, 1), dev, torch.Float32))
			s.Exp_(buf)
		}
		s.Cumsum_(buf, 1)
		total := s.Narrow(buf, 1, vocab-1, 1)                                  // (B, 1)
		thr := s.Mul(total, s.To(s.FromFloat32(us, b, 1), dev, torch.Float32)) // (B, 1)
		pos := s.Track(thr.Searchsorted(buf, false, false, "left", gts.None, false))
		pos = s.Reshape(s.ToDType(s.ClampMax(pos, float64(vocab-1)), torch.Int64), b) // (B)
		if tokens == nil {
			tokens = pos
		} else {
			isGreedy := make([]bool, b)
			for i, r := range rows {
				isGreedy[i] = r.Greedy()
			}
			tokens = s.Where(s.To(s.FromBool(isGreedy, b), dev, torch.Bool), tokens, pos)
		}
	}
	return tokens, lse
}
